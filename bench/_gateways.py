"""Helpers for the benches of several gateways on one PostgreSQL database
(``bench/chaos.py``, ``bench/lifecycle.py --database``): a fresh database on a server,
and gateways serving it, each a ``leasegate serve --database URL`` subprocess.

The first gateway on a fresh database prints the bootstrap keys; the others share
them (keys live in the database)."""

from __future__ import annotations

import secrets
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from _load import HOST, ROLES, Served, _start, cpu_seconds, free_port, start_leasegate, stop
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DEFAULT_SERVER = "postgresql://root@127.0.0.1:5432"


def create_database(server: str, prefix: str = "leasegate_bench") -> str:
    """A new empty database on ``server`` (a URL without a database, or with any);
    its URL."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(make_conninfo(server, dbname="postgres"), autocommit=True,
                         connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


def drop_database(url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True,
                         connect_timeout=5) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_gateway(name: str, data: Path, database: str, env: dict[str, str], *,
                  port: int | None = None, keys: dict[str, str] | None = None,
                  log: Path | None = None, timeout: float = 60.0) -> Served:
    """``leasegate serve --database`` on ``port`` (default: a free one), named ``name``
    (its ``gateway`` setting); ``keys``: those the first gateway printed."""
    port = port or free_port()
    argv = [sys.executable, "-m", "leasegate.cli", "serve", "--data", str(data),
            "--database", database, "--host", HOST, "--port", str(port),
            "--log-level", "WARNING"]
    served = _start(name, argv, port, {**env, "LEASEGATE_GATEWAY": name}, timeout, log)
    served.keys = {**(keys or {}), **served.keys}
    missing = set(ROLES) - set(served.keys)
    if missing:
        stop(served)
        raise RuntimeError(f"{name}: no key for {sorted(missing)} (a database that was "
                           "not fresh, and no keys given)")
    return served


def port_of(served: Served) -> int:
    return int(served.url.rsplit(":", 1)[1])


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


def postgres_cpu_seconds() -> float:
    """User + system CPU of every PostgreSQL server process on this machine (the
    database's share of a run; other databases' clients count too)."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "postgres":
                continue
            total += cpu_seconds(int(proc.name))
        except (OSError, ValueError):
            continue  # ended meanwhile
    return total


@dataclass
class Setup:
    """Where a bench mode runs: SQLite (one gateway), or ``gateways`` gateways on a
    fresh database of the PostgreSQL ``server``."""

    server: str | None = None
    gateways: int = 1

    @property
    def label(self) -> str:
        if self.server is None:
            return "SQLite"
        return f"PostgreSQL x{self.gateways}"


@dataclass
class Running:
    servers: list[Served]
    database: str | None = None

    @property
    def keys(self) -> dict[str, str]:
        return self.servers[0].keys

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    @property
    def url(self) -> str:
        return self.servers[0].url

    def cpu_seconds(self) -> float:
        """The gateways' CPU (user + system, all threads)."""
        return sum(cpu_seconds(s.pid) for s in self.servers)


def start_setup(setup: Setup, data: Path, env: dict[str, str]) -> Running:
    if setup.server is None:
        return Running([start_leasegate(data, env)])
    database = create_database(setup.server)
    running = Running([], database)
    try:
        for n in range(setup.gateways):
            running.servers.append(start_gateway(
                f"gw-{n}", data, database, env,
                keys=running.servers[0].keys if running.servers else None))
    except BaseException:
        stop_setup(running)
        raise
    return running


def stop_setup(running: Running) -> None:
    for served in running.servers:
        stop(served)
    if running.database is not None:
        drop_database(running.database)
