"""What a process costs, read from /proc: its CPU and memory, the machine's busy CPU,
the CPU of the PostgreSQL backends serving one database, and the disk's sync."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

CLK_TCK = os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+)\s+kB", text, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no VmRSS for pid {pid}")
    return int(found.group(1))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads) in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds all processes on this machine have used (all cores), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def fsync_ms(directory: Path, count: int = 200, budget: float = 3.0) -> list[float]:
    """Milliseconds for each 4 KiB append + fsync in ``directory``: the disk's commit floor."""
    path = directory / "fsync-probe"
    samples: list[float] = []
    deadline = time.perf_counter() + budget
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(count):
            if time.perf_counter() > deadline:
                break
            start = time.perf_counter()
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            samples.append((time.perf_counter() - start) * 1e3)
    finally:
        os.close(fd)
        path.unlink()
    return samples


class DatabaseCpu:
    """The CPU of the PostgreSQL backends serving one database (on this machine), from
    :meth:`start` to :meth:`seconds`: a backend is counted by its process title
    (``postgres: ... <user> <database> ...``), so other databases' clients on a shared
    server do not count; the server's shared processes (WAL writer, checkpointer) do
    not either. Read every ``every`` seconds on a thread: a backend whose client
    ended before the run did (a peer's worker process) counts up to its last reading."""

    def __init__(self, database: str, every: float = 0.1) -> None:
        """``database``: its URL or connection string."""
        self.name = conninfo_to_dict(database).get("dbname", "")
        self._every = every
        self._start: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _backends(self) -> dict[int, float]:
        found: dict[int, float] = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if not title.startswith("postgres:") or f" {self.name} " not in title:
                    continue
                found[int(proc.name)] = cpu_seconds(int(proc.name))
            except (OSError, ValueError):
                continue  # ended meanwhile
        return found

    def _watch(self) -> None:
        while not self._stop.wait(self._every):
            self._last.update(self._backends())

    def start(self) -> None:
        self._start = self._backends()
        self._last = dict(self._start)
        self._thread.start()

    def seconds(self) -> float:
        """CPU since :meth:`start` of every backend seen meanwhile."""
        self._stop.set()
        self._thread.join()
        self._last.update(self._backends())
        return sum(cpu - self._start.get(pid, 0.0) for pid, cpu in self._last.items())
