"""The peers' servers for ``bench/peers.py``: beanstalkd and redis-server started here
on free loopback ports with directories of their own, and a database of our own on
the local PostgreSQL. Each is stopped (or dropped) when its ``with`` block ends, on an
exception or Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _load import HOST, REPO, Served, free_port, stop

DEFAULT_POSTGRES = "postgresql://root@127.0.0.1:5432/postgres"
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


def _wait_port(served: Served, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            if served.process.poll() is not None or time.monotonic() > deadline:
                stop(served)
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"{served.name} did not accept on port {port}:\n{tail}"
                                   ) from None
            time.sleep(0.02)


def _spawn(name: str, argv: list[str], port: int, log: Path) -> Served:
    with log.open("w") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True,
                                   cwd=REPO)
    served = Served(name, process, f"{HOST}:{port}", {})
    _wait_port(served, port, log)
    return served


@contextlib.contextmanager
def beanstalkd(directory: Path) -> Iterator[Peer]:
    """beanstalkd with its binlog in ``directory`` and ``-f 0``: an fsync after every
    write (put, delete), before the reply."""
    directory.mkdir(parents=True)
    port = free_port()
    served = _spawn("beanstalkd", ["beanstalkd", "-l", HOST, "-p", str(port),
                                   "-b", str(directory), "-f", "0"],
                    port, directory.parent / "beanstalkd.log")
    try:
        yield Peer(served.url, served.pid)
    finally:
        stop(served)


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[Peer]:
    """redis-server with an append-only file fsynced on every write (``appendonly yes``,
    ``appendfsync always``), no snapshots, in ``directory``."""
    directory.mkdir(parents=True)
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", HOST, "--dir", str(directory),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning"]
    served = _spawn("redis-server", argv, port, directory.parent / "redis.log")
    try:
        yield Peer(served.url, served.pid)
    finally:
        stop(served)


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
    import psycopg

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


@contextlib.contextmanager
def postgres_database(url: str) -> Iterator[str]:
    """A fresh database on the server ``url`` names (dropped afterwards, connections
    and all); yields its connection string."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f"leasegate_peers_{os.getpid()}"
    with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(url, dbname=name)
    finally:
        with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


@contextlib.contextmanager
def procrastinate_database(url: str) -> Iterator[Peer]:
    """A fresh database (see :func:`postgres_database`) with procrastinate's schema."""
    import procrastinate

    with postgres_database(url) as dsn:
        connector = procrastinate.SyncPsycopgConnector(conninfo=dsn, min_size=1, max_size=1)
        with procrastinate.App(connector=connector).open() as app:
            app.schema_manager.apply_schema()
        yield Peer(dsn, None, dsn)
