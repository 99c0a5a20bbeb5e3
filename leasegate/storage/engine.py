"""What the SQL modules see of either engine: a connection, its cursors and rows, and
statements spelled once or, where the engines differ, twice.

Both engines' connections satisfy :class:`Connection`: ``sqlite3.Connection`` as it is,
and :class:`leasegate.storage.postgres.connection.PgConnection`, which takes the same
``?`` placeholders and gives rows that read as ``row["name"]`` and ``row[0]``. So a SQL
function is written once, against ``Connection``::

    def get(conn: Connection, task_id: str) -> Row | None:
        row: Row | None = conn.execute("SELECT * FROM tasks WHERE task_id = ?",
                                        (task_id,)).fetchone()
        return row

A statement the engines spell differently is a :class:`Spelled`: a ``str`` holding
SQLite's text that carries PostgreSQL's. sqlite3 runs it as the plain string it is (no
dispatch, no cost); the PostgreSQL connection runs :attr:`Spelled.postgresql` instead.
Formatting or concatenating one gives SQLite's text alone: a statement built from a
two-spelled piece picks the piece with :func:`spelling` first.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol, TypeAlias

Dialect = Literal["sqlite", "postgresql"]

Row: TypeAlias = sqlite3.Row
"""A row of either engine. PostgreSQL's (``postgres.connection.Row``) has all of
sqlite3.Row's interface (by index, by name, ``keys()``, length, iteration, equality) and
is declared its subtype to the type checker, so that code written for sqlite3 rows takes
both; ``isinstance(row, sqlite3.Row)`` is true of SQLite's alone."""


class Cursor(Protocol):
    """What the SQL modules use of a cursor."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A connection of either engine, in leasegate's use: explicit transactions (see
    ``connection.begin``), ``?`` placeholders, rows by name and by index."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor: ...

    @property
    def in_transaction(self) -> bool: ...

    @property
    def total_changes(self) -> int:
        """Rows inserted, updated or deleted by this connection since it opened."""
        ...


class Spelled(str):
    """A statement with two spellings: the string is SQLite's, ``postgresql`` is
    PostgreSQL's. Both must take the same parameters in the same order and give the
    same columns."""

    postgresql: str

    def __new__(cls, sqlite: str, postgresql: str) -> Spelled:
        spelled = super().__new__(cls, sqlite)
        spelled.postgresql = postgresql
        return spelled


def respelled(sqlite: str, *edits: tuple[str, str]) -> Spelled:
    """A statement whose PostgreSQL spelling is SQLite's with each ``(old, new)`` edit
    made (every occurrence of ``old``, which must occur): the differences in plain
    sight, the rest written once."""
    postgresql = sqlite
    for old, new in edits:
        if old not in postgresql:
            raise ValueError(f"{old!r} is not in {sqlite!r}")
        postgresql = postgresql.replace(old, new)
    return Spelled(sqlite, postgresql)


def skip_locked(select: str) -> Spelled:
    """A SELECT of rows the transaction is about to change, on PostgreSQL each locked as
    it is read (``FOR UPDATE SKIP LOCKED``): a row another gateway is changing right now
    is left to it (its commit decides, and the next pass sees what is left), and a row
    read here cannot change before this transaction's writes: what was read is what
    they change, without a lock on anything but those rows. SQLite's single writer
    needs neither."""
    return Spelled(select, select + " FOR UPDATE SKIP LOCKED")


def dialect(conn: Connection) -> Dialect:
    return "sqlite" if isinstance(conn, sqlite3.Connection) else "postgresql"


def spelling(conn: Connection, sql: str) -> str:
    """``sql`` as ``conn``'s engine spells it (to build a longer statement from)."""
    if isinstance(sql, Spelled) and not isinstance(conn, sqlite3.Connection):
        return sql.postgresql
    return sql
