"""The SQL modules' statements run unchanged on PostgreSQL: ``?`` placeholders (never
inside a literal), ``%`` as written, rows read by name and by index, a statement's
PostgreSQL spelling where the engines differ, ``lastrowid`` from RETURNING."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from leasegate.errors import InvalidRequest
from leasegate.storage.connection import begin, commit, rollback, savepoint, undo
from leasegate.storage.engine import Spelled, respelled, spelling
from leasegate.storage.postgres.connection import PgConnection, connect, to_psycopg


@pytest.fixture
def pg(postgres_url: str) -> Iterator[PgConnection]:
    conn = connect(postgres_url)
    conn.execute("CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
                 "name text NOT NULL, note text)")
    yield conn
    conn.close()


def test_placeholders_are_translated_outside_literals_names_and_comments() -> None:
    assert to_psycopg("SELECT a FROM t WHERE a = ? AND b IN (?, ?)") == (
        "SELECT a FROM t WHERE a = %s AND b IN (%s, %s)")
    assert to_psycopg("SELECT '?', 'it''s ?', \"odd?name\" FROM t -- why?\nWHERE a = ?") == (
        "SELECT '?', 'it''s ?', \"odd?name\" FROM t -- why?\nWHERE a = %s")
    assert to_psycopg("SELECT /* a ? b */ ?") == "SELECT /* a ? b */ %s"
    # psycopg reads every % of the text, in literals too: each is doubled.
    assert to_psycopg("SELECT 1 WHERE x NOT LIKE '@%' AND y = 10 % ?") == (
        "SELECT 1 WHERE x NOT LIKE '@%%' AND y = 10 %% %s")


def test_rows_read_by_name_by_index_and_as_a_sequence(pg: PgConnection) -> None:
    pg.execute("INSERT INTO t (name, note) VALUES (?, ?)", ("a?", None))
    row = pg.execute("SELECT name, note, 'x%' AS pct, ? AS given FROM t WHERE name = ?",
                     (7, "a?")).fetchone()
    assert (row["name"], row[0], row["note"], row["pct"], row["given"]) == ("a?", "a?", None,
                                                                          "x%", 7)
    assert row.keys() == ["name", "note", "pct", "given"]
    assert (len(row), tuple(row), row[1:3]) == (4, ("a?", None, "x%", 7), (None, "x%"))
    with pytest.raises(IndexError):
        row["missing"]
    again = pg.execute("SELECT name, note, 'x%' AS pct, ? AS given FROM t", (7,)).fetchone()
    assert again == row and hash(again) == hash(row)


def test_a_name_given_twice_reads_its_first(pg: PgConnection) -> None:
    pg.execute("INSERT INTO t (name) VALUES (?)", ("a",))
    row = pg.execute("SELECT *, id FROM t").fetchone()
    assert row["id"] == row[0] == row[3] == 1


def test_lastrowid_is_the_key_an_insert_returns_and_rowcount_counts(pg: PgConnection) -> None:
    first = pg.execute("INSERT INTO t (name) VALUES (?) RETURNING id", ("a",))
    second = pg.execute("INSERT INTO t (name) VALUES (?) RETURNING id", ("b",))
    assert (first.lastrowid, second.lastrowid) == (1, 2)
    assert pg.execute("INSERT INTO t (name) VALUES (?)", ("c",)).lastrowid is None
    assert pg.execute("UPDATE t SET note = ? WHERE id >= ?", ("n", 2)).rowcount == 2
    cur = pg.executemany("DELETE FROM t WHERE name = ?", [("a",), ("b",)])
    assert cur.rowcount >= 1
    assert [r["name"] for r in pg.execute("SELECT name FROM t ORDER BY id")] == ["c"]


def test_a_spelled_statement_runs_each_engines_text(pg: PgConnection) -> None:
    larger = respelled("SELECT max(?, ?)", ("max(", "greatest("))
    assert isinstance(larger, str) and larger == "SELECT max(?, ?)"
    lite = sqlite3.connect(":memory:")
    assert lite.execute(larger, (2, 5)).fetchone()[0] == 5
    assert pg.execute(larger, (2, 5)).fetchone()[0] == 5
    assert spelling(lite, larger) == "SELECT max(?, ?)"
    assert spelling(pg, larger) == "SELECT greatest(?, ?)"
    assert spelling(pg, "SELECT 1") == "SELECT 1"
    with pytest.raises(ValueError, match="min"):
        respelled("SELECT max(?, ?)", ("min(", "least("))
    assert Spelled("a", "b").postgresql == "b"


def test_transactions_and_savepoints_as_the_runtime_uses_them(pg: PgConnection) -> None:
    begin(pg)
    assert pg.in_transaction
    pg.execute("INSERT INTO t (name) VALUES ('kept')")
    savepoint(pg, "message")
    with pytest.raises(Exception, match="null value"):
        pg.execute("INSERT INTO t (name) VALUES (NULL)")  # the transaction is in error...
    undo(pg, "message")  # ...until its savepoint is undone
    pg.execute("INSERT INTO t (name) VALUES ('also kept')")
    commit(pg)
    assert not pg.in_transaction
    begin(pg)
    pg.execute("INSERT INTO t (name) VALUES ('dropped')")
    rollback(pg)
    rollback(pg)  # nothing open: nothing to do
    assert [r[0] for r in pg.execute("SELECT name FROM t ORDER BY id")] == ["kept", "also kept"]

    # Whatever the server's or the role's default, a write is READ COMMITTED.
    pg.execute("SET default_transaction_isolation = 'serializable'")
    begin(pg)
    assert pg.execute("SHOW transaction_isolation").fetchone()[0] == "read committed"
    rollback(pg)


def test_text_holding_nul_is_the_callers_error_not_ours(pg: PgConnection) -> None:
    """The backstop behind the HTTP models: any text with NUL that reaches PostgreSQL
    (which cannot store it) is a 400 (InvalidRequest), never a 500."""
    with pytest.raises(InvalidRequest, match="NUL"):
        pg.execute("INSERT INTO t (name) VALUES (?)", ("a\x00b",))
    with pytest.raises(InvalidRequest, match="NUL"):
        pg.executemany("INSERT INTO t (name) VALUES (?)", [("ok",), ("a\x00b",)])
