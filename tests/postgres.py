"""The PostgreSQL server the tests use, and a fresh database per test on it.

``LEASEGATE_TEST_POSTGRES`` names the server (``postgresql://root@127.0.0.1:5432``);
when it is set and the server does not answer, every PostgreSQL test fails. Unset, the
tests try that same address and, if nothing answers there, skip (one line says so at
the end of the run). Each test gets a database of its own, made from nothing and
dropped after it.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import make_conninfo

SERVER_VARIABLE = "LEASEGATE_TEST_POSTGRES"
DEFAULT_SERVER = "postgresql://root@127.0.0.1:5432"
SKIP_REASON = "no PostgreSQL server answers at"

# LEASEGATE_<NAME> variables are settings: a served gateway, or any load() that reads
# the environment, would refuse this one as unknown. It moves out of their way for the
# whole run (pytest-xdist's workers inherit the moved one).
KEPT_VARIABLE = "PYTEST_LEASEGATE_POSTGRES"
if SERVER_VARIABLE in os.environ:
    os.environ[KEPT_VARIABLE] = os.environ.pop(SERVER_VARIABLE)


@dataclass(frozen=True)
class Server:
    url: str

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(make_conninfo(self.url, dbname="postgres"), autocommit=True,
                               connect_timeout=5)

    def create_database(self, template: str | None = None) -> str:
        """A new database, empty or a copy of the database ``template`` (a URL this
        server gave, with no session on it); its URL."""
        name = f"leasegate_test_{secrets.token_hex(6)}"
        copy = "" if template is None else f' TEMPLATE "{_name(template)}"'
        with self._admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"{copy}')
        return urlunsplit(urlsplit(self.url)._replace(path=f"/{name}"))

    def migrated_template(self) -> str:
        """A database migrated to the latest version, to copy (``CREATE DATABASE ...
        TEMPLATE``: about 0.1 s with its drop, a third of making one and migrating it).
        Made once per test process; the caller drops it at the end."""
        from leasegate.storage.postgres.connection import connect
        from leasegate.storage.postgres.migrations import migrate

        url = self.create_database()
        conn = connect(url)
        try:
            migrate(conn)
        finally:
            conn.close()
        return url

    def drop_database(self, url: str) -> None:
        """Drop it, ending whatever sessions a test left on it."""
        name = _name(url)
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def find_server() -> tuple[Server | None, str, bool]:
    """``(server or None, why not, whether one is required)``."""
    given = os.environ.get(KEPT_VARIABLE)
    server = Server(given or DEFAULT_SERVER)
    try:
        server._admin().close()
    except psycopg.Error as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"{SKIP_REASON} {server.url} ({why})", given is not None
    return server, "", given is not None
