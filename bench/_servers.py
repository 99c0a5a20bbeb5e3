"""The servers the benches start, each a subprocess on a free loopback port, and stop:
``leasegate serve`` (on SQLite, or gateways on a fresh PostgreSQL database), the bare
Quart-Trio route of ``bench/baseline_app.py``, and the peers of ``bench/peers.py``
(beanstalkd and redis-server with directories of their own, procrastinate's schema in a
database of its own). The peers are ``with`` blocks: stopped (or dropped) when the block
ends, on an exception or Ctrl-C too.

On a fresh PostgreSQL database the first gateway prints the bootstrap keys; the others
share them (keys live in the database). Everything is bounded: every wait has a
deadline, and only loopback addresses are used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import queue
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from _readings import cpu_seconds
from psycopg.conninfo import make_conninfo

HOST = "127.0.0.1"
ROLES = ("admin", "worker", "client")
REPO = Path(__file__).resolve().parent.parent
DEFAULT_SERVER = "postgresql://root@127.0.0.1:5432"


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


@dataclass
class Served:
    name: str
    process: subprocess.Popen[str]
    url: str  # http://host:port, or a peer's host:port
    keys: dict[str, str]
    output: list[str] = field(default_factory=list)  # the last lines it printed

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


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


def _wait_accepting(served: Served, deadline: float, tail: Path | None = None) -> None:
    """Until ``served``'s port accepts a connection (stopped, and an error naming it, if
    it exits or the deadline passes first; ``tail``: its log, quoted then)."""
    while True:
        try:
            socket.create_connection((HOST, served.port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or served.process.poll() is not None:
                stop(served)
                log = tail.read_text(errors="replace")[-2000:] if tail and tail.exists() else ""
                raise RuntimeError(f"{served.name} never accepted on port {served.port}"
                                   + (f":\n{log}" if log else "")) from None
            time.sleep(0.02)


# ---- leasegate and the bare route ------------------------------------------------------


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


def start_process(name: str, argv: list[str], port: int, env: dict[str, str],
                  timeout: float = 30.0, log: Path | None = None) -> Served:
    """``argv`` until it prints ``serving http://`` and accepts on ``port``; the keys
    it prints on the way (``<role> lg_...``) are kept."""
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
    _wait_accepting(served, deadline)
    return served


def start_leasegate(data: Path, env: dict[str, str], timeout: float = 30.0,
                    log: Path | None = None, log_level: str = "WARNING",
                    python: str = sys.executable, database: str | None = None,
                    name: str = "leasegate", port: int | None = None,
                    keys: dict[str, str] | None = None) -> Served:
    """``leasegate serve`` on ``data`` (``timeout``: a first start on a big database
    checks it, and takes longer); every line it prints also goes to ``log``.
    ``python``: another checkout's (``-P``: its own tree, not this one's, is imported).
    ``database``: a PostgreSQL URL, served as the gateway ``name`` on ``port`` (default:
    a free one); ``keys``: those the first gateway on it printed."""
    port = port or free_port()
    argv = [python, "-P", "-m", "leasegate.cli", "serve", "--data", str(data),
            "--host", HOST, "--port", str(port), "--log-level", log_level]
    if database is not None:
        argv += ["--database", database]
        env = {**env, "LEASEGATE_GATEWAY": name}
    served = start_process(name, argv, port, env, timeout, log)
    served.keys = {**(keys or {}), **served.keys}
    missing = set(ROLES) - set(served.keys)
    if missing:
        stop(served)
        raise RuntimeError(f"{name} printed no bootstrap key for {sorted(missing)}"
                           + (" (a database that was not fresh, and no keys given)"
                              if database else ""))
    return served


def start_gateway(name: str, data: Path, database: str, env: dict[str, str], *,
                  port: int | None = None, keys: dict[str, str] | None = None,
                  log: Path | None = None, timeout: float = 60.0) -> Served:
    """``leasegate serve --database`` on ``port`` (default: a free one), named ``name``
    (its ``gateway`` setting); ``keys``: those the first gateway printed."""
    return start_leasegate(data, env, timeout, log, database=database, name=name,
                           port=port, keys=keys)


def start_baseline(env: dict[str, str]) -> Served:
    port = free_port()
    argv = [sys.executable, str(REPO / "bench" / "baseline_app.py"),
            "--host", HOST, "--port", str(port)]
    return start_process("baseline", argv, port, env)


# ---- PostgreSQL databases and gateways on them ------------------------------------------


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


# ---- the peers of bench/peers.py ----------------------------------------------------------

DEFAULT_POSTGRES = f"{DEFAULT_SERVER}/postgres"
START_SECONDS = 15.0
# What each peer needs, and how to get it (printed, one line, when something is missing).
NEEDS = {
    "beanstalkd": (("beanstalkd",), ("greenstalk",)),
    "rq": (("redis-server",), ("rq", "redis")),
    "procrastinate": ((), ("procrastinate", "psycopg")),
}
INSTALL = {
    "beanstalkd": "make bench-deps (apt-get install beanstalkd) and pip install -e '.[bench]'",
    "rq": "make bench-deps (apt-get install redis-server) and pip install -e '.[bench]'",
    "procrastinate": "pip install -e '.[bench]', and a PostgreSQL server (--postgres URL)",
}


@dataclass(frozen=True)
class Peer:
    """A peer's server as its clients reach it."""

    target: str  # host:port, or a PostgreSQL connection string
    pid: int | None  # None: a shared server, whose CPU is not ours to count
    database: str | None = None  # on PostgreSQL: its database, whose backends' CPU counts


def missing(peer: str) -> list[str]:
    """What ``peer`` needs that this machine lacks: commands and Python packages."""
    commands, modules = NEEDS[peer]
    return ([c for c in commands if shutil.which(c) is None]
            + [m for m in modules if importlib.util.find_spec(m) is None])


@contextlib.contextmanager
def _peer_server(name: str, argv: list[str], port: int, log: Path) -> Iterator[Peer]:
    with log.open("w") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True,
                                   cwd=REPO)
    served = Served(name, process, f"{HOST}:{port}", {})
    try:
        _wait_accepting(served, time.monotonic() + START_SECONDS, log)
        yield Peer(served.url, served.pid)
    finally:
        stop(served)


def beanstalkd(directory: Path) -> contextlib.AbstractContextManager[Peer]:
    """beanstalkd with its binlog in ``directory`` and ``-f 0``: an fsync after every
    write (put, delete), before the reply."""
    directory.mkdir(parents=True)
    port = free_port()
    return _peer_server("beanstalkd", ["beanstalkd", "-l", HOST, "-p", str(port),
                                       "-b", str(directory), "-f", "0"],
                        port, directory.parent / "beanstalkd.log")


def redis_server(directory: Path) -> contextlib.AbstractContextManager[Peer]:
    """redis-server with an append-only file fsynced on every write (``appendonly yes``,
    ``appendfsync always``), no snapshots, in ``directory``."""
    directory.mkdir(parents=True)
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", HOST, "--dir", str(directory),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning"]
    return _peer_server("redis-server", argv, port, directory.parent / "redis.log")


@contextlib.contextmanager
def procrastinate_database(url: str) -> Iterator[Peer]:
    """A fresh database on the server ``url`` names, with procrastinate's schema
    (dropped afterwards, connections and all)."""
    import procrastinate

    dsn = create_database(url, prefix="leasegate_peers")
    try:
        connector = procrastinate.SyncPsycopgConnector(conninfo=dsn, min_size=1, max_size=1)
        with procrastinate.App(connector=connector).open() as app:
            app.schema_manager.apply_schema()
        yield Peer(dsn, None, dsn)
    finally:
        drop_database(dsn)


def version(argv: list[str]) -> str:
    """The first line a ``--version``-like command prints ("" if it fails)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return ""
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else ""


def postgres_settings(url: str) -> str:
    """The server's version and durability settings, or why it cannot be reached."""
    try:
        with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
            rows = [conn.execute(f"SHOW {name}").fetchone()
                    for name in ("server_version", "fsync", "synchronous_commit")]
    except psycopg.Error as error:
        raise RuntimeError(f"PostgreSQL at {_safe(url)} did not answer: "
                           f"{str(error).strip().splitlines()[0]}") from None
    version_, fsync, commit = (str(row[0]) if row else "?" for row in rows)
    return f"PostgreSQL {version_.split()[0]}, fsync {fsync}, synchronous_commit {commit}"


def _safe(url: str) -> str:
    """``url`` without a password."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}" if "@" in rest else url
