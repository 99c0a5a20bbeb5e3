"""Connections as leasegate uses them, on either engine, and SQLite's :class:`Database`.

The transaction helpers (:func:`begin`, :func:`commit`, :func:`savepoint`, ...) and
:func:`is_storage_failure` take a connection of either engine (``engine.Connection``).
SQLite's :class:`Database` is one connection on one dedicated thread
(``thread.ConnectionThread``); PostgreSQL's is ``postgres.database.Database``::

    db = Database.open(path, synchronous="FULL")
    count = await db.run(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0])
"""

from __future__ import annotations

import errno
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, cast

from leasegate.storage.durability import Durability
from leasegate.storage.engine import Connection, Spelled
from leasegate.storage.thread import ConnectionThread
from leasegate.storage.wal_sync import WalSync

BUSY_TIMEOUT_MS = 5000

# Result codes that mean "the storage is failing", not "the code is wrong":
# the gateway answers 5030 and keeps serving, so it recovers once the cause
# (a full disk, a flaky volume, a long lock) is gone.
_STORAGE_FAILURE_CODES = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_NOMEM,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL,
}


def is_storage_failure(exc: BaseException) -> bool:
    """True for a database error caused by the storage rather than by our SQL: on
    SQLite a busy, full, failing or read-only file; on PostgreSQL a lost connection, a
    server shutting down or out of resources, a deadlock or a serialization failure
    (``postgres.failures``)."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and (code & 0xFF) in _STORAGE_FAILURE_CODES
    if "psycopg" in sys.modules:  # a PostgreSQL error needs psycopg loaded
        from leasegate.storage.postgres.failures import is_postgres_failure

        return is_postgres_failure(exc)
    return False


# The same for file operations (artifacts, backups): the disk is full, over
# quota or over a size limit, read-only or failing. Answered 503, not 500.
DISK_FAILURE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS,
                                 errno.EFBIG})


def is_disk_failure(exc: BaseException) -> bool:
    """True for a file error caused by the disk (full, failing) rather than by our code,
    and for a database storage failure."""
    if isinstance(exc, OSError):
        return exc.errno in DISK_FAILURE_ERRNOS
    return is_storage_failure(exc)


def connect(path: Path | str, synchronous: str = "FULL") -> sqlite3.Connection:
    """Open an SQLite connection the way leasegate uses every connection.

    Autocommit mode (``isolation_level=None``): transactions are explicit, and
    writers take the lock up front with ``BEGIN IMMEDIATE``.
    """
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    # A statement that may change many rows inside a savepoint (every message has one)
    # keeps a statement journal to undo it; on disk that is a temporary file opened and
    # removed per statement, so it is kept in memory, where it holds only the pages one
    # statement changes; the WAL, not the statement journal, is what a crash recovers
    # from.
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn


# PRAGMA synchronous reads back as a number. In WAL mode FULL syncs the WAL at every
# commit; NORMAL only at checkpoints, so a power cut loses the last commits; OFF never.
_SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
_DURABLE_SYNCHRONOUS = 2
_PIPELINED_SYNCHRONOUS = 1  # NORMAL: COMMIT writes the WAL, the pipeline syncs it


def _in_wal_mode(conn: sqlite3.Connection) -> bool:
    return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"


def sqlite_durability(conn: sqlite3.Connection, *, wal_synced: bool = False) -> Durability:
    """The SQLite engine's answer to "is this storage durable?", from the connection;
    ``wal_synced``: the commit pipeline syncs this connection's commits (NORMAL in WAL
    mode then keeps the promise)."""
    level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    if level >= _DURABLE_SYNCHRONOUS or (wal_synced and level == _PIPELINED_SYNCHRONOUS
                                         and _in_wal_mode(conn)):
        return Durability()
    name = _SYNCHRONOUS_NAMES.get(level, str(level))
    return Durability((f"sqlite_synchronous = {name} (FULL or EXTRA keeps the promise)",))


# SQLite's writers take the write lock up front; PostgreSQL's transactions are READ
# COMMITTED, whatever the server's default (docs/postgresql.md says why).
BEGIN = Spelled("BEGIN IMMEDIATE", "BEGIN ISOLATION LEVEL READ COMMITTED")


@contextmanager
def transaction(conn: Connection) -> Iterator[Connection]:
    """:func:`begin` … ``COMMIT``; any exception rolls back and propagates."""
    begin(conn)
    try:
        yield conn
    except BaseException:
        rollback(conn)
        raise
    conn.execute("COMMIT")


def begin(conn: Connection) -> None:
    """Start a write transaction (on SQLite taking the lock up front)."""
    conn.execute(BEGIN)


def commit(conn: Connection) -> None:
    conn.execute("COMMIT")


def rollback(conn: Connection) -> None:
    """Roll back the open transaction, if the engine has not already done so (SQLite
    after some errors; PostgreSQL when the connection was lost)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def savepoint(conn: Connection, name: str) -> None:
    """Open a savepoint: a part of the transaction that can be undone alone.
    ``name`` is the caller's constant, never a client's."""
    conn.execute(f"SAVEPOINT {name}")


class _Deferring(Protocol):
    def later(self, sql: str) -> None: ...


def release(conn: Connection, name: str) -> None:
    """Keep what was done since the savepoint ``name``. On PostgreSQL the RELEASE is
    sent with the next SAVEPOINT, in one round trip, or dropped by the COMMIT (which
    releases every savepoint): what it changes is seen by nobody before then."""
    if isinstance(conn, sqlite3.Connection):
        conn.execute(f"RELEASE {name}")
    else:
        cast(_Deferring, conn).later(f"RELEASE {name}")


def undo(conn: Connection, name: str) -> None:
    """Undo what was done since the savepoint ``name`` and close it (on PostgreSQL
    this also clears the error state a failed statement left)."""
    conn.execute(f"ROLLBACK TO {name}")
    conn.execute(f"RELEASE {name}")


class Database(ConnectionThread[sqlite3.Connection]):
    """An SQLite connection and the thread that owns it (see :class:`ConnectionThread`).

    ``Database(path)`` opens nothing; ``await db.start()`` connects on the thread;
    :meth:`open` connects now, for the command line and for tests.

    ``wal_sync`` (the commit pipeline, :mod:`leasegate.storage.wal_sync`; one for every
    connection to the file): with ``synchronous`` FULL or EXTRA the connection commits
    with NORMAL and ``wal_sync`` syncs the WAL off the write lock before anyone is told
    (``run`` returns, ``run_committed``'s wait ends). Not in WAL mode: no pipeline.
    """

    thread_name = "leasegate-sqlite"

    def __init__(self, path: Path | str, synchronous: str = "FULL", *,
                 inline: bool = False, wal_sync: WalSync | None = None) -> None:
        super().__init__(inline=inline)
        self.path = path
        self.synchronous = synchronous
        if synchronous.upper() in ("FULL", "EXTRA"):  # else nothing syncs: nothing to pipe
            self._wal_sync = wal_sync

    @classmethod
    def open(cls, path: Path | str, synchronous: str = "FULL", *, inline: bool = False) -> Database:
        """A database connected now (blocking: not for the event loop)."""
        db = cls(path, synchronous, inline=inline)
        db._open_now()
        return db

    def _open_now(self) -> None:
        if self._wal_sync is not None:
            self._wal_sync.start()
        super()._open_now()

    async def start(self) -> None:
        if self._wal_sync is not None:
            self._wal_sync.start()
        await super().start()

    def _connect(self) -> sqlite3.Connection:
        conn = connect(self.path, self.synchronous)
        if self._wal_sync is not None:
            if _in_wal_mode(conn):
                conn.execute("PRAGMA synchronous = NORMAL")
            else:  # a rollback journal: SQLite's own syncs, inside COMMIT
                self._wal_sync = None
        return conn

    def _disconnect(self, conn: sqlite3.Connection) -> None:
        conn.close()

    def _not_open(self) -> Exception:
        return sqlite3.OperationalError(f"the database {self.path} is not open")

    async def durability(self) -> Durability:
        """Whether this database keeps "durable before acknowledged" (see
        :mod:`leasegate.storage.durability`). Cancellation: as :meth:`run`."""
        return await self.run(
            lambda conn: sqlite_durability(conn, wal_synced=self._wal_sync is not None))

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<Database {self.path} inline={self._inline}>"
