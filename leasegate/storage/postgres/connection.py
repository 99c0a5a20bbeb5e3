"""A psycopg connection that runs the SQL modules' statements unchanged.

:class:`PgConnection` is the thin wrapper that satisfies ``engine.Connection``:
``execute(sql, params)`` takes SQLite's ``?`` placeholders (each distinct statement
is translated to psycopg's ``%s`` once, and cached), runs a ``Spelled`` statement's
PostgreSQL spelling, and gives :class:`Row` s that read like ``sqlite3.Row``::

    conn = connect("postgresql://root@127.0.0.1:5432/leasegate")
    row = conn.execute("SELECT task_id, status FROM tasks WHERE task_id = ?", ("t1",)).fetchone()
    row["status"], row[0], row.keys()

Transactions are explicit, as on SQLite: the driver is in autocommit mode and
``connection.begin`` sends ``BEGIN ISOLATION LEVEL READ COMMITTED``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, Literal, cast, overload

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import RowMaker

from leasegate.errors import InvalidRequest
from leasegate.storage import engine
from leasegate.storage.connection import BUSY_TIMEOUT_MS
from leasegate.storage.engine import Spelled
from leasegate.storage.postgres.failures import SchemaChanged

if TYPE_CHECKING:
    import sqlite3

    from psycopg._cursor_base import BaseCursor

    _RowBase = sqlite3.Row
else:
    _RowBase = object

# Server settings of every connection: a lock waited on longer than SQLite's busy
# timeout fails the turn as a storage failure (503) rather than hang it; a session left
# idle inside a transaction (a bug) is ended by the server rather than hold its locks
# against every other gateway.
LOCK_TIMEOUT = f"{BUSY_TIMEOUT_MS}ms"
SESSION = (f"SET lock_timeout = '{LOCK_TIMEOUT}'; "
           "SET idle_in_transaction_session_timeout = '60s'")

# libpq's defaults wait hours on a peer that vanished; a storage thread must notice a
# dead server in seconds (it then fails the turn and reconnects). A URL may override.
CONNECT_DEFAULTS: Final[Mapping[str, str]] = {
    "connect_timeout": "10", "keepalives_idle": "10", "keepalives_interval": "5",
    "keepalives_count": "3", "tcp_user_timeout": "30000",
}


class Row(_RowBase):
    """One row, read like ``sqlite3.Row``: ``row["name"]``, ``row[0]``, ``row[1:]``,
    ``keys()``, ``len()``, iteration over the values; equal to a row with the same
    names and values. A name given twice (``SELECT *, rowid``) reads its first."""

    __slots__ = ("_index", "_names", "_values")

    def __init__(self, names: tuple[str, ...], index: Mapping[str, int],
                 values: tuple[Any, ...]) -> None:
        self._names = names
        self._index = index
        self._values = values

    @overload
    def __getitem__(self, key: int | str, /) -> Any: ...

    @overload
    def __getitem__(self, key: slice, /) -> tuple[Any, ...]: ...

    def __getitem__(self, key: int | str | slice, /) -> Any:
        if isinstance(key, str):
            try:
                return self._values[self._index[key]]
            except KeyError:
                raise IndexError(f"no column {key!r}") from None
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._names)

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row):
            return NotImplemented
        return self._names == other._names and self._values == other._values

    def __hash__(self) -> int:
        return hash((self._names, self._values))

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._names, self._values, strict=True))!r})"


@lru_cache(maxsize=1024)
def _layout(raw: tuple[bytes | None, ...]) -> tuple[tuple[str, ...], Mapping[str, int]]:
    """A result's column names, and each name's first position."""
    names = tuple((name or b"").decode() for name in raw)
    index: dict[str, int] = {}
    for position, name in enumerate(names):
        index.setdefault(name, position)
    return names, index


def rows(cursor: BaseCursor[Any, Any]) -> RowMaker[Row]:
    """psycopg's row factory for :class:`Row`. The names are read from the result
    itself (``PQfname``), not from ``cursor.description``, which builds a ``Column``
    (and looks up its type) for every column of every statement."""
    result = cursor.pgresult
    names, index = _layout(() if result is None else
                           tuple(result.fname(n) for n in range(result.nfields)))

    def make(values: Sequence[Any]) -> Row:
        return Row(names, index, tuple(values))

    return make


class Cursor(psycopg.Cursor[Row]):
    """psycopg's cursor with sqlite3's ``lastrowid``: the key an ``INSERT ...
    RETURNING key`` gave (the PostgreSQL spelling of an insert whose id the caller
    reads), else None."""

    @property
    def lastrowid(self) -> int | None:
        result = self.pgresult
        if result is None or result.status != pq.ExecStatus.TUPLES_OK:
            return None
        row = self.fetchone()
        return None if row is None else int(row[0])


_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/|\?|%""", re.S)


@lru_cache(maxsize=1024)
def to_psycopg(sql: str) -> str:
    """SQLite's text with ``?`` placeholders as psycopg's: each ``?`` outside string
    literals, quoted names and comments becomes ``%s``, and every ``%`` (in literals
    and comments too: psycopg reads the whole text) becomes ``%%``. Not for E'' strings or
    dollar quotes (leasegate's statements have none). Bounded cache: statements built
    with one ``?`` per value (``IN`` lists) are many."""

    def token(match: re.Match[str]) -> str:
        text = match[0]
        return "%s" if text == "?" else text.replace("%", "%%")

    return _TOKENS.sub(token, sql)


# A whole transaction's end: every savepoint is released (or undone) by it.
_ENDS: Final = frozenset({"COMMIT", "ROLLBACK"})


def _statement(sql: str) -> str:
    return to_psycopg(sql.postgresql if isinstance(sql, Spelled) else sql)


def _refuse_nul(exc: psycopg.DataError) -> None:
    """Text holding NUL, which PostgreSQL cannot store (psycopg refuses it before
    sending): the caller's bad input, a 400, not a bug of ours. The HTTP models refuse
    it first on both engines; this is the backstop for any text they do not see."""
    if "NUL" in str(exc):
        raise InvalidRequest("text must not contain NUL (\\u0000): the database "
                             "cannot store it") from exc


class PgConnection:
    """A psycopg connection in leasegate's use (``engine.Connection``); ``raw`` is
    psycopg's own, for what only PostgreSQL does (migrations, durability)."""

    dialect: Final[Literal["postgresql"]] = "postgresql"

    def __init__(self, raw: psycopg.Connection[Row]) -> None:
        self.raw = raw
        self._changes = 0  # sqlite3's total_changes: rows our statements wrote
        self._later: list[str] = []  # RELEASEs not sent yet (see later)

    def later(self, sql: str) -> None:
        """Send ``sql`` (a ``RELEASE``: no parameters, no rows) with the next statement
        that needs it: in the same round trip as a ``SAVEPOINT``; not at all before a
        ``COMMIT`` or ``ROLLBACK`` of the whole transaction (which release every
        savepoint); alone before any other statement."""
        self._later.append(sql)

    def _flush_later(self, sql: str) -> str | None:
        """The text to send for ``sql`` (parameterless) with what waits, or None."""
        later, self._later = self._later, []
        if sql in _ENDS:
            return sql
        if sql.startswith("SAVEPOINT "):
            return "; ".join([*later, sql])
        self._run(lambda cursor: cursor.execute("; ".join(later)))
        return None

    # Typed as engine.Cursor (rows are Any), as sqlite3's are.
    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> engine.Cursor:
        if self._later:
            if not parameters and (joined := self._flush_later(sql)) is not None:
                return self._run(lambda cursor: cursor.execute(joined))
            if self._later:
                self._flush_later("")
        return self._run(lambda cursor: cursor.execute(_statement(sql), parameters))

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> engine.Cursor:
        if self._later:
            self._flush_later("")
        return self._run(lambda cursor: cursor.executemany(_statement(sql), parameters))

    def _run(self, statement: Callable[[Cursor], object]) -> engine.Cursor:
        """``statement`` on a new cursor: a stale prepared plan replaced, NUL refused
        as bad input, the rows it wrote counted."""
        cursor = cast(Cursor, self.raw.cursor())
        try:
            statement(cursor)
        except psycopg.errors.FeatureNotSupported as exc:
            self._replace_if_stale(exc)
            raise
        except psycopg.DataError as exc:
            _refuse_nul(exc)
            raise
        self._count_changes(cursor)
        return cursor

    def _count_changes(self, cursor: Cursor) -> None:
        status = cursor.statusmessage  # e.g. "UPDATE 3"; "SELECT 1" writes nothing
        if status is not None and status.startswith(("INSERT", "UPDATE", "DELETE")):
            self._changes += max(cursor.rowcount, 0)

    @property
    def total_changes(self) -> int:
        """Rows our INSERT, UPDATE and DELETE statements changed, as sqlite3 counts."""
        return self._changes

    def _replace_if_stale(self, exc: psycopg.Error) -> None:
        """psycopg prepares a statement it has run five times; a migration that changes
        the columns of a table a prepared ``SELECT *`` reads makes each later run of it
        fail. The connection (and its prepared statements) goes; the next call makes a
        new one."""
        if "cached plan must not change result type" in str(exc):
            self.raw.close()
            raise SchemaChanged(f"a table changed under a prepared statement: {exc}") from exc

    @property
    def in_transaction(self) -> bool:
        """A transaction is open (or failed, waiting for its ROLLBACK). False once the
        connection is lost: the server has rolled it back already."""
        status = self.raw.info.transaction_status
        return not self.broken and status in (pq.TransactionStatus.INTRANS,
                                              pq.TransactionStatus.INERROR)

    @property
    def broken(self) -> bool:
        """Lost or closed: the next call needs a new connection."""
        return self.raw.closed or self.raw.broken

    def close(self) -> None:
        self.raw.close()


def connect(url: str, *, application_name: str = "leasegate") -> PgConnection:
    """Connect to the database ``url`` names, the way leasegate uses every connection:
    driver autocommit (transactions are explicit), :class:`Row` rows, the session
    settings above. Blocking."""
    given = conninfo_to_dict(url)
    options = {name: value for name, value in CONNECT_DEFAULTS.items() if name not in given}
    if "application_name" not in given:
        options["application_name"] = application_name
    raw = psycopg.Connection.connect(make_conninfo(url, **options), autocommit=True,
                                     row_factory=rows, cursor_factory=Cursor)
    try:
        raw.execute(SESSION)
    except BaseException:
        raw.close()
        raise
    return PgConnection(raw)
