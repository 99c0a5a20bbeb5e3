"""Helpers for ``bench/dispatch.py``: subprocess servers, /proc readings, load loops.

Everything here is bounded: every loop has a count or a deadline, and only
loopback addresses are used.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import httpx
import trio

HOST = "127.0.0.1"
ROLES = ("admin", "worker", "client")
REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range: a port from that
    range (``bind`` to 0) can be taken by any outgoing connection of this busy machine
    before the server we start binds it ("port is in use")."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        port = random.randrange(max(1024, low - 10_000), max(1025, low))
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


# ---- servers as subprocesses --------------------------------------------------------


@dataclass
class Served:
    name: str
    process: subprocess.Popen[str]
    url: str
    keys: dict[str, str]
    output: list[str] = field(default_factory=list)  # the last lines it printed

    @property
    def pid(self) -> int:
        return self.process.pid


def _pump(process: subprocess.Popen[str], lines: queue.Queue[str | None],
          keep: list[str], log: Path | None) -> None:
    """Drain the child's output (so its pipe never fills) and remember the tail (all of
    it in ``log``, when given)."""
    assert process.stdout is not None
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(log.open("a")) if log else None
        for line in process.stdout:
            keep.append(line.rstrip())
            del keep[:-40]
            lines.put(line)
            if sink:
                sink.write(line)
                sink.flush()
    lines.put(None)


def _start(name: str, argv: list[str], port: int, env: dict[str, str],
           timeout: float = 30.0, log: Path | None = None) -> Served:
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **env}, cwd=REPO,
    )
    served = Served(name, process, f"http://{HOST}:{port}", {})
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(process, lines, served.output, log),
                     daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            stop(served)
            raise RuntimeError(f"{name} did not start within {timeout:.0f} s") from None
        if line is None:
            code = process.wait()
            tail = "\n".join(served.output)
            raise RuntimeError(f"{name} exited with {code} before serving:\n{tail}")
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ROLES and parts[1].startswith("lg_"):
            served.keys[parts[0]] = parts[1]
        if "serving http://" in line:
            break
    # The line may come just before the socket is bound: wait until it accepts.
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return served
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                stop(served)
                raise RuntimeError(f"{name} never accepted on port {port}") from None
            time.sleep(0.02)


def start_leasegate(data: Path, env: dict[str, str], timeout: float = 30.0,
                    log: Path | None = None, log_level: str = "WARNING") -> Served:
    """``leasegate serve`` on ``data`` (``timeout``: a first start on a big database
    checks it, and takes longer); every line it prints also goes to ``log``."""
    port = free_port()
    argv = [sys.executable, "-m", "leasegate.cli", "serve", "--data", str(data),
            "--host", HOST, "--port", str(port), "--log-level", log_level]
    served = _start("leasegate", argv, port, env, timeout, log)
    missing = set(ROLES) - set(served.keys)
    if missing:
        stop(served)
        raise RuntimeError(f"leasegate printed no bootstrap key for {sorted(missing)}")
    return served


def start_baseline(env: dict[str, str]) -> Served:
    port = free_port()
    argv = [sys.executable, str(REPO / "bench" / "baseline_app.py"),
            "--host", HOST, "--port", str(port)]
    return _start("baseline", argv, port, env)


def stop(served: Served) -> None:
    """SIGTERM, then SIGKILL after 10 s; safe to call twice."""
    process = served.process
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def share_out(target: Callable[..., None], total: int, count: int,
              *args: object) -> tuple[list[Connection], list[BaseProcess]]:
    """``count`` processes (not started) that share ``total`` items: each runs
    ``target(*args, first, its_count, pipe)``; the pipes' other ends are returned."""
    context = multiprocessing.get_context("spawn")
    pipes: list[Connection] = []
    processes: list[BaseProcess] = []
    share = -(-total // count)
    for c in range(count):
        ours, theirs = context.Pipe()
        pipes.append(ours)
        processes.append(context.Process(
            target=target, args=(*args, c * share, min(share, total - c * share), theirs),
            daemon=True))
    return pipes, processes


# ---- /proc readings -----------------------------------------------------------------


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


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# ---- closed-loop load -----------------------------------------------------------------


@dataclass
class LoadResult:
    ok: int = 0
    errors: int = 0
    duration: float = 0.0
    latencies: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    server_cpu: float = 0.0  # CPU seconds the server used during the run
    generator_cpu: float = 0.0  # CPU seconds this process used during the run
    machine_cpu: float = 0.0  # CPU seconds every process on the machine used
    slices: list[float] = field(default_factory=list)  # rate of each slice absorbed

    @property
    def per_second(self) -> float:
        return self.ok / self.duration if self.duration else 0.0

    @property
    def others_cpu(self) -> float:
        """CPU seconds used by processes other than the server and this one."""
        return max(0.0, self.machine_cpu - self.server_cpu - self.generator_cpu)

    def absorb(self, other: LoadResult) -> None:
        """Add a slice of the same load to this total."""
        self.ok += other.ok
        self.errors += other.errors
        self.duration += other.duration
        self.latencies += other.latencies
        self.failures.update(other.failures)
        self.server_cpu += other.server_cpu
        self.generator_cpu += other.generator_cpu
        self.machine_cpu += other.machine_cpu
        self.slices.append(other.per_second)


def one_connection_client(url: str, headers: dict[str, str], timeout: float) -> httpx.AsyncClient:
    """A client that keeps exactly one keep-alive connection."""
    return httpx.AsyncClient(
        base_url=url, headers=headers, timeout=timeout,
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
    )


async def closed_loop(clients: list[httpx.AsyncClient], path: str, body: bytes,
                      expect: int, duration: float, server_pid: int) -> LoadResult:
    """Each client POSTs ``body`` back to back until ``duration`` has passed.

    A request counts as acknowledged when its status is ``expect``. Requests
    already sent when the time is up are waited for (and counted); the
    duration is measured to the last one's end.
    """
    result = LoadResult()
    headers = {"Content-Type": "application/json"}
    cpu0, own0, all0 = cpu_seconds(server_pid), time.process_time(), machine_busy_seconds()
    start = time.perf_counter()
    end = start + duration

    async def one(client: httpx.AsyncClient) -> None:
        now = time.perf_counter()
        while now < end:
            try:
                reply = await client.post(path, content=body, headers=headers)
            except httpx.HTTPError as exc:
                result.errors += 1
                result.failures[type(exc).__name__] += 1
                await trio.sleep(0.01)  # a dead server must not spin this loop
            else:
                if reply.status_code == expect:
                    result.ok += 1
                else:
                    result.errors += 1
                    result.failures[f"HTTP {reply.status_code}"] += 1
            done = time.perf_counter()
            result.latencies.append(done - now)
            now = done

    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(one, client)
    result.duration = time.perf_counter() - start
    result.server_cpu = cpu_seconds(server_pid) - cpu0
    result.generator_cpu = time.process_time() - own0
    result.machine_cpu = machine_busy_seconds() - all0
    return result


# ---- metrics ----------------------------------------------------------------------------


async def actor_gauge(admin: httpx.AsyncClient, metric: str, actor: str = "queries") -> float:
    """``metric{actor="..."}`` from the admin ``/metrics`` page (0 when absent)."""
    reply = await admin.get("/metrics")
    reply.raise_for_status()
    pattern = rf'^{re.escape(metric)}\{{actor="{re.escape(actor)}"\}}\s+(\S+)$'
    found = re.search(pattern, reply.text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def parked_queries(admin: httpx.AsyncClient) -> int:
    """The ``leasegate_actor_waiting_polls{actor="queries"}`` gauge."""
    return int(await actor_gauge(admin, "leasegate_actor_waiting_polls"))


async def wait_until(check: Callable[[int], bool], admin: httpx.AsyncClient,
                     within: float) -> tuple[int, float]:
    """Poll the parked gauge until ``check(n)`` or ``within`` seconds; returns (n, seconds)."""
    start = time.perf_counter()
    n = await parked_queries(admin)
    while not check(n) and time.perf_counter() - start < within:
        await trio.sleep(0.05)
        n = await parked_queries(admin)
    return n, time.perf_counter() - start


@contextlib.asynccontextmanager
async def open_clients(n: int, url: str, headers: dict[str, str],
                       request_timeout: float) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``n`` clients, each with its own keep-alive connection; all closed on exit."""
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(one_connection_client(url, headers, request_timeout))
               for _ in range(n)]
