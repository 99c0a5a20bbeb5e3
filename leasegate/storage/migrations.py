"""Schema migrations, applied in order by version (``PRAGMA user_version``).

A migration is never edited once released; a change is a new version. Each
actor's SQL module holds the DDL of its tables; this list fixes the order.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from leasegate.storage import (
    artifacts_sql,
    devices_sql,
    events_sql,
    keys_sql,
    lanes_sql,
    ledger_sql,
    presence_sql,
    queries_sql,
    tasks_sql,
)


def _respell_checks(conn: sqlite3.Connection) -> None:
    """Migration 12: the tables' CHECK constraints rewritten to equivalent ones, by
    SQLite's documented procedure for constraint changes that leave every stored row
    valid (edit ``sqlite_schema``, bump ``schema_version``), inside the migration's
    transaction: a table rebuild would copy every row for nothing."""
    version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute("PRAGMA writable_schema = ON")
    try:
        for table, respelled in (("tasks", tasks_sql.CHECKS_RESPELLED),
                                 ("queries", queries_sql.CHECKS_RESPELLED)):
            (sql,) = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' "
                                  "AND name = ?", (table,)).fetchone()
            for old, new in respelled:
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


MIGRATIONS: list[tuple[int, str, str | Callable[[sqlite3.Connection], None]]] = [
    (1, "api keys", keys_sql.SCHEMA),
    (2, "queries", queries_sql.SCHEMA),
    (3, "tasks and workers", tasks_sql.SCHEMA),
    (4, "task artifacts", artifacts_sql.SCHEMA),
    (5, "workers by key", presence_sql.SCHEMA_KEYS),
    (6, "job id tombstones",
     tasks_sql.SCHEMA_TOMBSTONES + queries_sql.SCHEMA_TOMBSTONES),
    (7, "ledger", ledger_sql.SCHEMA),
    (8, "devices", devices_sql.SCHEMA),
    (9, "lease indexes and task lanes",
     lanes_sql.SCHEMA + queries_sql.SCHEMA_READY + tasks_sql.SCHEMA_UNRESOLVED),
    (10, "job events", events_sql.SCHEMA),
    (11, "task lanes refreshed by index seeks", lanes_sql.SCHEMA_REFRESH),
    (12, "status checks spelled as comparisons", _respell_checks),
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


def migrate(conn: sqlite3.Connection) -> list[int]:
    """Bring the schema up to date; returns the versions applied.

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
    for number, _name, ddl in MIGRATIONS:
        if number <= version:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if callable(ddl):
                ddl(conn)
            else:
                for statement in statements(ddl):
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        applied.append(number)
    return applied
