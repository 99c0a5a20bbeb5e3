"""The PostgreSQL server the tests use, and a fresh database per test on it.

``LEASEGATE_TEST_POSTGRES`` names the server (``postgresql://root@127.0.0.1:5432``);
when it is set and the server does not answer, every PostgreSQL test fails. Unset, the
tests try that same address and, if nothing answers there, skip (one line says so at
the end of the run). A test that asks for an empty database gets one made from nothing
and dropped after it; one that asks for a migrated database gets one from this test
process's :class:`Pool`: a copy of the migrated template, reset after each test to
what the template holds (and renamed, so that nothing the test left behind can reach
the next test's database).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
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

    def rename_database(self, url: str) -> str:
        """End every session on ``url``'s database, rename it, and return its new URL:
        the old one no longer connects."""
        name = _name(url)
        new = f"leasegate_test_{secrets.token_hex(6)}"
        with self._admin() as admin:
            for _ in range(1000):  # some 10 s: terminated sessions take a moment to end
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
                try:
                    admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(name), sql.Identifier(new)))
                    break
                except psycopg.errors.ObjectInUse:  # a session still ending, or new
                    time.sleep(0.01)
            else:
                raise Dirty(f"sessions on {name} do not end")
        return urlunsplit(urlsplit(self.url)._replace(path=f"/{new}"))

    def drop_database(self, url: str) -> None:
        """Drop it, ending whatever sessions a test left on it."""
        name = _name(url)
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# What a database's catalog holds beyond its rows: its own objects (tables, indexes,
# sequences and their parameters, functions, triggers, constraints, defaults, types,
# views' rules, policies, schemas, extensions, event triggers, comments), the settings ALTER
# DATABASE/ROLE ... SET gave it, the planner statistics ANALYZE (or autovacuum) wrote,
# and its large objects. pg_class's columns that TRUNCATE and VACUUM change are left out.
_CATALOG = """
WITH own_classes AS (
    SELECT c.oid, to_jsonb(c) - 'relfilenode' - 'relpages' - 'reltuples' - 'relallvisible'
                                - 'relfrozenxid' - 'relminmxid' AS row
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
), rows AS (
    SELECT 'class' AS kind, row FROM own_classes
    UNION ALL SELECT 'attribute', to_jsonb(a) FROM pg_attribute a
               WHERE a.attrelid IN (SELECT oid FROM own_classes)
    UNION ALL SELECT 'default', to_jsonb(d) - 'adbin' || jsonb_build_object(
                         'expr', pg_get_expr(d.adbin, d.adrelid)) FROM pg_attrdef d
               WHERE d.adrelid IN (SELECT oid FROM own_classes)
    UNION ALL SELECT 'index', to_jsonb(i) - 'indexprs' - 'indpred' FROM pg_index i
               WHERE i.indrelid IN (SELECT oid FROM own_classes)
    UNION ALL SELECT 'sequence', to_jsonb(s) FROM pg_sequence s
    UNION ALL SELECT 'constraint', to_jsonb(c) - 'conbin' FROM pg_constraint c
               WHERE c.connamespace NOT IN ('pg_catalog'::regnamespace,
                                            'information_schema'::regnamespace)
    UNION ALL SELECT 'trigger', to_jsonb(t) FROM pg_trigger t
               WHERE t.tgrelid IN (SELECT oid FROM own_classes)
    UNION ALL SELECT 'rule', to_jsonb(r) - 'ev_qual' - 'ev_action' FROM pg_rewrite r
               WHERE r.ev_class IN (SELECT oid FROM own_classes)
    UNION ALL SELECT 'policy', to_jsonb(p) - 'polqual' - 'polwithcheck' FROM pg_policy p
    UNION ALL SELECT 'function', to_jsonb(p) FROM pg_proc p
               WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace,
                                            'information_schema'::regnamespace)
    UNION ALL SELECT 'type', to_jsonb(t) FROM pg_type t
               WHERE t.typnamespace NOT IN ('pg_catalog'::regnamespace,
                                            'information_schema'::regnamespace)
    UNION ALL SELECT 'schema', to_jsonb(n) FROM pg_namespace n
               WHERE n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%'
    UNION ALL SELECT 'extension', to_jsonb(e) FROM pg_extension e
    UNION ALL SELECT 'event trigger', to_jsonb(e) FROM pg_event_trigger e
    UNION ALL SELECT 'setting', to_jsonb(s) FROM pg_db_role_setting s
               WHERE s.setdatabase = (SELECT oid FROM pg_database
                                       WHERE datname = current_database())
    UNION ALL SELECT 'statistics', jsonb_build_object('table', s.starelid::regclass::text,
                                                      'column', s.staattnum)
                FROM pg_statistic s WHERE s.starelid IN (SELECT oid FROM own_classes)
    UNION ALL SELECT 'extended statistics', to_jsonb(s) FROM pg_statistic_ext s
    UNION ALL SELECT 'large object', to_jsonb(l) FROM pg_largeobject_metadata l
    UNION ALL SELECT 'comment', to_jsonb(d) FROM pg_description d WHERE d.objoid >= 16384
)
SELECT md5(string_agg(kind || ' ' || row::text, E'\n' ORDER BY kind, row::text)) FROM rows
"""


def catalog_digest(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """A digest of the catalog of ``conn``'s database (see ``_CATALOG``)."""
    row = conn.execute(_CATALOG).fetchone()
    assert row is not None
    return str(row[0])


# Databases per test process: one for the running test while the last one's is reset.
POOL_SIZE = 2

_SIZES = ("SELECT format('%I.%I', n.nspname, c.relname), pg_total_relation_size(c.oid) "
          "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
          "WHERE c.relkind IN ('r', 'p') "
          "AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')")


class Pool:
    """Migrated databases of one test process, each a copy of ``template`` reused test
    after test: :meth:`take` one (a copy made if none is ready), and :meth:`give_back`
    it after its test, to be reset (on a thread of its own while the next test runs) to
    the template's state, as if copied anew:

    - every session on it ends (a test's connections, a served gateway's, autovacuum's),
      and with them their advisory locks, LISTEN channels, temporary tables and
      session settings; then it is renamed, so that a connection the test would still
      try (to the URL it was given) fails as it would on a dropped database;
    - its catalog (see ``_CATALOG``: objects, settings, planner statistics) must be the
      template's: a database whose is not (a test changed the schema, or autovacuum
      analyzed a table) is dropped, and a test gets a new copy instead;
    - every table whose storage (heap, indexes, TOAST, all forks) is not the size of
      the template's (a row was written to it, even rolled back) is truncated, and so
      is every table the migrations wrote rows to (``schema_version``), with the
      tables whose foreign keys refer to them (CASCADE); the migrations' rows are
      copied back as the template holds them; every sequence takes the template's
      position; the statistics counters start from zero (autovacuum waits as long as
      on a new copy). A TRUNCATE rebuilds each index of the table and syncs it to disk:
      some 5 ms an index, so only the tables written to are.

    A reset that fails drops the database: the pool never hands out one it could not
    make clean (errors other than :class:`Dirty` are raised by :meth:`close`)."""

    def __init__(self, server: Server, template: str) -> None:
        self.server = server
        self.template = template
        self._ready: collections.deque[concurrent.futures.Future[str | None]] = (
            collections.deque())
        self._resetter = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="leasegate test database reset")
        self._errors: list[BaseException] = []
        self._count = 0  # databases taken, ready or being reset
        with psycopg.connect(template, autocommit=True) as conn:
            self._sizes = {str(name): int(size) for name, size in conn.execute(_SIZES)}
            self._seeds: dict[str, bytes] = {}
            for table in sorted(self._sizes):
                if conn.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone() == (True,):
                    with conn.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as copy:
                        self._seeds[table] = b"".join(bytes(block) for block in copy)
            self._sequences = [(str(name), int(value), bool(called))
                               for name, value, called in conn.execute(
                "SELECT format('%I.%I', schemaname, sequencename), "
                "coalesce(last_value, start_value), last_value IS NOT NULL FROM pg_sequences")]
            self._digest = catalog_digest(conn)

    def take(self) -> str:
        """A migrated database for one test: a reset one, else a new copy while the pool
        has fewer than :data:`POOL_SIZE`, else the next one its reset gives back."""
        while self._ready:
            done = [f for f in self._ready if f.done()]
            if not done and self._count >= POOL_SIZE:
                done = [self._ready[0]]
            if not done:
                break
            self._ready.remove(done[0])
            url = done[0].result()
            if url is not None:
                return url
            self._count -= 1
        self._count += 1
        return self.server.create_database(template=self.template)

    def give_back(self, url: str) -> None:
        """``url``'s test is over: reset its database for another (or drop it)."""
        self._ready.append(self._resetter.submit(self._reset_or_drop, url))

    def close(self) -> None:
        """Drop every database of the pool; raise the first error a reset met."""
        self._resetter.shutdown(wait=True)
        while self._ready:
            url = self._ready.popleft().result()
            if url is not None:
                self.server.drop_database(url)
        if self._errors:
            raise self._errors[0]

    def _reset_or_drop(self, url: str) -> str | None:
        try:
            return self._reset(url)
        except Exception as exc:
            self.server.drop_database(url)  # not renamed: a failure before (or of) that
            if not isinstance(exc, Dirty):
                self._errors.append(exc)
            return None

    def _reset(self, url: str) -> str:
        fresh = self.server.rename_database(url)
        try:
            with psycopg.connect(fresh, autocommit=True) as conn:
                if catalog_digest(conn) != self._digest:
                    raise Dirty(f"{_name(url)}'s catalog is not its template's")
                written = sorted({str(name) for name, size in conn.execute(_SIZES)
                                  if self._sizes.get(str(name)) != int(size)} | set(self._seeds))
                with conn.transaction():
                    conn.execute(f"TRUNCATE {', '.join(written)} RESTART IDENTITY CASCADE")
                    for table, rows in self._seeds.items():
                        with conn.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as copy:
                            copy.write(rows)
                    for name, value, called in self._sequences:
                        conn.execute("SELECT setval(%s, %s, %s)", (name, value, called))
                conn.execute("SELECT pg_stat_reset()")
        except BaseException:
            self.server.drop_database(fresh)
            raise
        return fresh


class Dirty(Exception):
    """A database the pool cannot reset: dropped instead."""


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
