"""Migrations: each released one frozen as the text it applied, every older database
brought to the same schema as a new one, and that schema the one ``schema.sql`` shows.

Migration 12 rewrites the status CHECKs of tasks and queries in place: an existing
database keeps its rows, and the constraints still refuse what they refused."""

from __future__ import annotations

import hashlib
import inspect
import re
import sqlite3
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

import leasegate.storage
from leasegate.storage.connection import connect
from leasegate.storage.migrations import FROZEN, MIGRATIONS, Step, current_version, migrate

LATEST = MIGRATIONS[-1][0]
STORAGE = Path(leasegate.storage.__file__).parent
SCHEMA_SQL = STORAGE / "sqlite" / "schema.sql"

# A released migration is never edited: a change is a new migration. Once one is
# released (merged), its digest goes here.
RELEASED = {
    1: "be14b55b4c681add",  # api keys
    2: "7dfd617d502ba13a",  # queries
    3: "3be1eddd287c31c7",  # tasks and workers
    4: "0afde8daa521d364",  # task artifacts
    5: "be11dd0e4162c159",  # workers by key
    6: "3e82765b25339c9c",  # job id tombstones
    7: "ad4c8f0d0f2c19e6",  # ledger
    8: "d8d4128d286a854f",  # devices
    9: "f573968df38e6856",  # lease indexes and task lanes
    10: "898ea12ce4ef6cf6",  # job events
    11: "35664b40d2aa4a56",  # task lanes refreshed by index seeks
    12: "671800a6ae5672ab",  # status checks spelled as comparisons
    13: "7673c4c3f43cdc34",  # sites
    14: "36ac19a875f1eefc",  # periodic runs
    15: "d116c49663fe311f",  # job errors and search
    16: "2492f16e8b758cc6",  # site tokens
    18: "5ed174d2978af094",  # query retries
    19: "e5a3f4463d4f95d2",  # schedules
    20: "9ef3e3fb05f137a3",  # webhooks
    22: "bd084ab734c3efe7",  # key revocation order
    24: "e6cbc5778cc68183",  # worker channels
    25: "09e05f8aacb47d98",  # job events by time
}



def at_version(path: Path, last: int) -> sqlite3.Connection:
    conn = connect(path, synchronous="OFF")
    migrate(conn, upto=last)
    assert current_version(conn) == last
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


SCHEMA = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name"


@pytest.mark.parametrize("old_version", [n for n, _, _ in MIGRATIONS[:-1]])
def test_a_new_database_gets_the_same_schema_as_a_migrated_one(
        tmp_path: Path, old_version: int) -> None:
    """Byte for byte: a database made by any earlier version converges."""
    old = at_version(tmp_path / "old.db", old_version)
    migrate(old)
    new = connect(tmp_path / "new.db", synchronous="OFF")
    migrate(new)
    assert [tuple(r) for r in old.execute(SCHEMA)] == [tuple(r) for r in new.execute(SCHEMA)]
    assert current_version(old) == current_version(new) == LATEST


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


# ---- frozen --------------------------------------------------------------------------

def digest(step: Step) -> str:
    text = step if isinstance(step, str) else inspect.getsource(step)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def assert_released_unchanged(migrations: Sequence[tuple[int, str, Step]],
                              released: dict[int, str]) -> None:
    """Every migration has its digest in ``released``, and is as it was released."""
    for number, name, step in migrations:
        now = digest(step)
        assert number in released, (
            f"migration {number} ({name}) has no digest: once released, add {number}: {now!r}")
        assert released[number] == now, (
            f"migration {number} ({name}) was released and has changed: a change to the "
            "schema is a new migration")


def test_released_migrations_are_never_edited() -> None:
    assert_released_unchanged(MIGRATIONS, RELEASED)


def test_the_migrations_are_numbered_in_order_and_every_script_is_one_of_them() -> None:
    # Rising; a number may be missing (numbers are handed out to branches before they
    # land, and a branch may end up not needing its own).
    numbers = [number for number, _, _ in MIGRATIONS]
    assert numbers == sorted(set(numbers)) and numbers[:12] == list(range(1, 13))
    listed = {step for _, _, step in MIGRATIONS if isinstance(step, str)}
    for script in FROZEN.iterdir():
        assert script.read_text(encoding="utf-8") in listed, f"{script.name} is not listed"


def test_the_sql_files_ship_in_the_package() -> None:
    pyproject = tomllib.loads((STORAGE.parents[1] / "pyproject.toml").read_text())
    shipped = pyproject["tool"]["setuptools"]["package-data"]["leasegate.storage"]
    files = sorted(path.relative_to(STORAGE) for path in STORAGE.rglob("*.sql"))
    assert files
    for path in files:  # a glob of setuptools' package-data matches within one directory
        assert any(len(path.parts) == len(Path(glob).parts) and path.match(glob)
                   for glob in shipped), f"{path} is not in pyproject's package-data"
