"""Helpers for the benches of several gateways on one PostgreSQL database
(``bench/chaos.py``, ``bench/lifecycle.py --database``): a fresh database on a server,
and gateways serving it, each a ``leasegate serve --database URL`` subprocess.

The first gateway on a fresh database prints the bootstrap keys; the others share
them (keys live in the database)."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from _load import HOST, ROLES, Served, _start, free_port, stop
from psycopg.conninfo import make_conninfo

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
