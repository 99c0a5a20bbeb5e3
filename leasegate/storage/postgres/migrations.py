"""Schema migrations on PostgreSQL: the same version numbers as SQLite's.

The first is 12, the baseline: it makes at once the schema SQLite's migrations 1-12
make (no PostgreSQL database was ever at an earlier version). A later change is a new
version appended to both engines' lists with the same number, so that "schema version
N" means the same tables on both; a change one engine does not need is still listed on
the other, as a script that changes nothing. Released migrations are frozen, as
SQLite's: the text under ``postgres/migrations/`` never changes, and ``schema.sql``
(checked by the tests) shows what they make.

The version is kept in the table ``schema_version`` (one row per migration applied;
PostgreSQL has no ``user_version``). Gateways that start together take turns: the
runner holds a session advisory lock on :data:`MIGRATION_LOCK` for the whole run, and
reads the version under it, so the first applies and the others find nothing to do.
Each migration runs in a transaction of its own with its row in ``schema_version``
(PostgreSQL's DDL is transactional): a crash leaves the schema at a whole version.
"""

from __future__ import annotations

from importlib.resources import files

from leasegate.storage.connection import rollback
from leasegate.storage.migrations import SchemaTooNew, frozen
from leasegate.storage.postgres.connection import LOCK_TIMEOUT, PgConnection

FROZEN = files("leasegate.storage") / "postgres" / "migrations"

# The advisory lock key of a migration run ("leasegat" in ASCII); advisory locks are
# per database, so installations in two schemas of one database also take turns.
MIGRATION_LOCK = int.from_bytes(b"leasegat", "big")

BOOKKEEPING = ("CREATE TABLE IF NOT EXISTS schema_version (\n"
               "    version    integer PRIMARY KEY,\n"
               "    name       text NOT NULL,\n"
               "    applied_at timestamp with time zone NOT NULL DEFAULT now()\n"
               ")")

# Append only: a released entry, and the file it names, never change.
MIGRATIONS: list[tuple[int, str, str]] = [
    frozen(12, "baseline", FROZEN),
    frozen(13, "sites", FROZEN),
    frozen(14, "periodic runs", FROZEN),
    frozen(15, "job errors and search", FROZEN),
    frozen(16, "site tokens", FROZEN),
    frozen(18, "query retries", FROZEN),
    frozen(19, "schedules", FROZEN),
    frozen(20, "webhooks", FROZEN),
    frozen(22, "key revocation order", FROZEN),
    frozen(24, "worker channels", FROZEN),
    frozen(25, "job events by time", FROZEN),
]


def current_version(conn: PgConnection) -> int:
    """The last version applied; 0 for a database leasegate never migrated."""
    exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]
    if not exists:
        return 0
    return int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
               .fetchone()[0])


def migrate(conn: PgConnection, *, upto: int | None = None) -> list[int]:
    """Bring the schema up to date (``upto``: only as far as that version); returns
    the versions applied. Blocks while another gateway migrates the same database;
    raises :class:`SchemaTooNew` for a database a newer leasegate migrated."""
    # Waiting for another gateway's run is not a lock to give up on after
    # lock_timeout: a migration may take minutes.
    conn.execute("SET lock_timeout = 0")
    conn.execute("SELECT pg_advisory_lock(?)", (MIGRATION_LOCK,))
    try:
        conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        conn.execute(BOOKKEEPING)
        return _apply(conn, upto)
    finally:
        if not conn.broken:
            conn.execute("SELECT pg_advisory_unlock(?)", (MIGRATION_LOCK,))


def _apply(conn: PgConnection, upto: int | None) -> list[int]:
    applied: list[int] = []
    latest = MIGRATIONS[-1][0]
    version = current_version(conn)
    if version > latest:
        raise SchemaTooNew(
            f"database schema version {version} is newer than this leasegate ({latest})")
    for number, name, script in MIGRATIONS:
        if number <= version or (upto is not None and number > upto):
            continue
        conn.execute("BEGIN")
        try:
            conn.raw.execute(script)  # several statements, no placeholders: as written
            conn.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)",
                         (number, name))
        except BaseException:
            rollback(conn)
            raise
        conn.execute("COMMIT")
        applied.append(number)
    return applied
