"""The schema a migrated database has is the one ``schema.sql`` shows.

Migration 12 rewrites the status CHECKs of tasks and queries in place: an existing
database keeps its rows, and the constraints still refuse what they refused."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import leasegate.storage
from leasegate.storage.connection import connect
from leasegate.storage.migrations import MIGRATIONS, current_version, migrate, statements


def at_version(path: Path, last: int) -> sqlite3.Connection:
    conn = connect(path, synchronous="OFF")
    for number, _name, ddl in MIGRATIONS:
        if number > last:
            break
        assert isinstance(ddl, str)
        for statement in statements(ddl):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    return conn


def add_rows(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO tasks (task_id, tenant, site, account, kind, params, "
                 "fingerprint, status, created_at, updated_at, expires_at, lease_owner, "
                 "lease_token, started_at, lease_expires_at) VALUES ('t1', 'ten', 's', 'a', "
                 "'k', '{}', 'f', 'running', 1, 1, 9, 'w', 'tok', 1, 5)")
    conn.execute("INSERT INTO queries (query_id, tenant, site, kind, params, fingerprint, "
                 "status, created_at, updated_at, expires_at) VALUES ('q1', 'ten', 's', 'k', "
                 "'{}', 'f', 'queued', 1, 1, 9)")


def test_an_existing_database_keeps_its_rows_and_its_constraints(tmp_path: Path) -> None:
    path = tmp_path / "leasegate.db"
    old = at_version(path, 11)
    add_rows(old)
    old.close()

    conn = connect(path, synchronous="OFF")
    assert migrate(conn) == [n for n, _, _ in MIGRATIONS if n > 11]
    assert current_version(conn) == MIGRATIONS[-1][0]
    assert [tuple(r) for r in conn.execute("SELECT status FROM tasks")] == [("running",)]
    assert [tuple(r) for r in conn.execute("SELECT status FROM queries")] == [("queued",)]
    for table in ("tasks", "queries"):
        (sql,) = conn.execute("SELECT sql FROM sqlite_schema WHERE name = ?",
                              (table,)).fetchone()
        assert "status IN" not in sql and "status NOT IN" not in sql, sql

    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE tasks SET status = 'bogus' WHERE task_id = 't1'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # in flight, no lease
        conn.execute("UPDATE tasks SET lease_owner = NULL WHERE task_id = 't1'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE queries SET status = 'running' WHERE query_id = 'q1'")
    conn.execute("UPDATE tasks SET status = 'succeeded' WHERE task_id = 't1'")
    assert [tuple(r) for r in conn.execute("PRAGMA integrity_check")] == [("ok",)]


def test_a_new_database_gets_the_same_schema_as_a_migrated_one(tmp_path: Path) -> None:
    old = at_version(tmp_path / "old.db", 11)
    migrate(old)
    new = connect(tmp_path / "new.db", synchronous="OFF")
    migrate(new)
    schema = "SELECT type, name, sql FROM sqlite_schema ORDER BY type, name"
    assert [tuple(r) for r in old.execute(schema)] == [tuple(r) for r in new.execute(schema)]


SCHEMA = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name"
SCHEMA_SQL = Path(leasegate.storage.__file__).parent / "sqlite" / "schema.sql"
LATEST = MIGRATIONS[-1][0]


# ---- schema.sql --------------------------------------------------------------------

_TOKEN = re.compile(r"""\s+|--[^\n]*|/\*.*?\*/
                        |('(?:[^']|'')*'|"(?:[^"]|"")*"|\w+|<>|<=|>=|!=|\|\||.)""",
                    re.S | re.X)


def tokens(sql: str) -> str:
    """The statement without its comments and spacing."""
    return " ".join(m[1] for m in _TOKEN.finditer(sql) if m[1])


def objects(conn: sqlite3.Connection) -> dict[tuple[str, str, str], str | None]:
    return {(kind, name, table): None if sql is None else tokens(sql)
            for kind, name, table, sql in conn.execute(SCHEMA)}


def test_a_freshly_migrated_database_has_the_schema_that_schema_sql_shows(
        tmp_path: Path) -> None:
    migrated = connect(tmp_path / "migrated.db", synchronous="OFF")
    migrate(migrated)
    shown = connect(tmp_path / "shown.db", synchronous="OFF")
    shown.executescript(SCHEMA_SQL.read_text(encoding="utf-8"))

    have, show = objects(migrated), objects(shown)
    wrong = sorted(key for key in have.keys() | show.keys() if have.get(key) != show.get(key))
    raw = {(kind, name, table): sql for kind, name, table, sql in migrated.execute(SCHEMA)}
    assert not wrong, "schema.sql differs from a migrated database in:\n" + "\n".join(
        f"{kind} {name}: the database has\n{raw.get((kind, name, table)) or 'nothing'}"
        for kind, name, table in wrong)
    assert current_version(shown) == current_version(migrated) == LATEST


def test_the_comparison_sees_a_changed_constraint() -> None:
    assert tokens("CHECK (a <> 'x'\n  -- why\n  OR b)") == tokens("CHECK (a <> 'x' OR b)")
    assert tokens("sites TEXT\n, key_id TEXT)") == tokens("sites TEXT,\n    key_id TEXT\n)")
    assert tokens("CHECK (a <> 'x y')") != tokens("CHECK (a <> 'x  y')")
    assert tokens("CHECK (a >= 0)") != tokens("CHECK (a > 0)")
