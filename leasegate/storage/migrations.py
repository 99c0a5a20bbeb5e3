"""Schema migrations, applied in order by version (``PRAGMA user_version``).

A released migration is frozen: its SQL is the text it applied when it was
released, in a file of its own under ``sqlite/migrations/`` (or literal strings
here, for a migration that is a function), never built from a module's live
constants, so that a database made by any earlier version and a new one end
with the same schema (the tests hold a digest of each released one). A change
is a new version appended to :data:`MIGRATIONS`, and ``sqlite/schema.sql`` (the
schema every database has after the last one, checked by the tests) changes
with it.

The runner is SQLite's; PostgreSQL's (``postgres/migrations.py``) keeps a list of
its own with the same version numbers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from importlib.resources import files
from importlib.resources.abc import Traversable

Step = str | Callable[[sqlite3.Connection], None]
Migration = tuple[int, str, Step]
"""Its version, its name, and its SQL script or the function that applies it."""

FROZEN = files("leasegate.storage") / "sqlite" / "migrations"


def frozen(number: int, name: str, folder: Traversable = FROZEN) -> tuple[int, str, str]:
    """Migration ``number`` as released: the script ``NNNN_<name>.sql`` under ``folder``
    (SQLite's by default)."""
    script = folder / f"{number:04d}_{name.replace(' ', '_')}.sql"
    return number, name, script.read_text(encoding="utf-8")


def _respell_checks(conn: sqlite3.Connection) -> None:
    """Migration 12: the status CHECKs of tasks and queries spelled as comparisons (the
    same constraints: an IN list of three or more is built as a temporary table by every
    statement that writes a row, 8-15 us a statement).

    They are rewritten by SQLite's documented procedure for constraint changes that
    leave every stored row valid (edit ``sqlite_schema``, bump ``schema_version``),
    inside the migration's transaction: a table rebuild would copy every row for
    nothing."""
    # Each old constraint (of migration 3 or 2: text that occurs once in its table's
    # CREATE TABLE) and the one that replaces it, as released.
    respelled = (
        ("tasks", (
            ("CHECK (status IN ('queued', 'leased', 'running', 'succeeded', 'failed', "
             "'canceled',\n                          'paused', 'stale', 'expired'))",
             "CHECK (status = 'queued' OR status = 'leased' OR status = 'running'\n"
             "               OR status = 'succeeded' OR status = 'failed' "
             "OR status = 'canceled'\n"
             "               OR status = 'paused' OR status = 'stale' OR status = 'expired')"),
            ("CHECK (status NOT IN ('leased', 'running', 'stale')\n"
             "           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL))",
             "CHECK ((status <> 'leased' AND status <> 'running' AND status <> 'stale')\n"
             "           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL))"),
        )),
        ("queries", (
            ("CHECK (status IN ('queued', 'leased', 'succeeded', 'failed', 'expired'))",
             "CHECK (status = 'queued' OR status = 'leased' OR status = 'succeeded' "
             "OR status = 'failed' OR status = 'expired')"),
        )),
    )
    version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute("PRAGMA writable_schema = ON")
    try:
        for table, edits in respelled:
            (sql,) = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' "
                                  "AND name = ?", (table,)).fetchone()
            for old, new in edits:
                if sql.count(old) != 1:
                    raise RuntimeError(f"migration 12: {table} has no constraint {old!r}")
                sql = sql.replace(old, new)
            conn.execute("UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?",
                         (sql, table))
        conn.execute(f"PRAGMA schema_version = {version + 1}")
    finally:
        conn.execute("PRAGMA writable_schema = OFF")
    problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise RuntimeError(f"migration 12: the schema does not check: {problems[:5]}")


# Append only: a released entry, and the file it names, never change.
MIGRATIONS: list[Migration] = [
    frozen(1, "api keys"),
    frozen(2, "queries"),
    frozen(3, "tasks and workers"),
    frozen(4, "task artifacts"),
    frozen(5, "workers by key"),
    frozen(6, "job id tombstones"),
    frozen(7, "ledger"),
    frozen(8, "devices"),
    frozen(9, "lease indexes and task lanes"),
    frozen(10, "job events"),
    frozen(11, "task lanes refreshed by index seeks"),
    (12, "status checks spelled as comparisons", _respell_checks),
    frozen(13, "sites"),
    frozen(14, "periodic runs"),
    frozen(15, "job errors and search"),
    frozen(16, "site tokens"),
    frozen(18, "query retries"),
    frozen(19, "schedules"),
    frozen(20, "webhooks"),
    frozen(22, "key revocation order"),
    frozen(24, "worker channels"),
    frozen(25, "job events by time"),
]


class SchemaTooNew(RuntimeError):
    """The database was written by a newer leasegate."""


def current_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def statements(ddl: str) -> list[str]:
    """The statements of a DDL script; a trigger's body keeps its own semicolons."""
    found: list[str] = []
    pending = ""
    for piece in ddl.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                found.append(pending)
            pending = ""
    if pending.strip(" \n;"):
        raise ValueError(f"incomplete statement in a migration: {pending.strip()!r}")
    return found


def migrate(conn: sqlite3.Connection, *, upto: int | None = None) -> list[int]:
    """Bring the schema up to date (``upto``: only as far as that version); returns
    the versions applied.

    Each migration runs in its own ``BEGIN IMMEDIATE`` transaction together
    with the version bump, so a crash leaves the schema at a whole version.
    """
    applied: list[int] = []
    latest = MIGRATIONS[-1][0]
    version = current_version(conn)
    if version > latest:
        raise SchemaTooNew(
            f"database schema version {version} is newer than this leasegate ({latest})"
        )
    for number, _name, step in MIGRATIONS:
        if number <= version or (upto is not None and number > upto):
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if callable(step):
                step(conn)
            else:
                for statement in statements(step):
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        applied.append(number)
    return applied
