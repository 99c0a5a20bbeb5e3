"""One SQLite connection on one dedicated thread.

sqlite3 connections are thread-affine, so each :class:`Database` owns a thread
that runs every call for it, fed by a queue. Callers wait for their call even
when cancelled: a write that was handed to SQLite is finished (committed or
rolled back) before anyone is told anything, which is what "durable before
acknowledged" needs::

    db = Database.open(path, synchronous="FULL")
    count = await db.run(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0])

``inline=True`` runs the calls on the trio thread instead. Tests use it so
that the autojump clock never jumps while SQLite works.
"""

from __future__ import annotations

import errno
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import outcome
import trio

from leasegate.storage.durability import Durability

T = TypeVar("T")

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
    """True for an SQLite error caused by the storage rather than by our SQL."""
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return False
    return (code & 0xFF) in _STORAGE_FAILURE_CODES


# The same for file operations (artifacts, backups): the disk is full, over
# quota or over a size limit, read-only or failing. Answered 503, not 500.
DISK_FAILURE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS,
                                 errno.EFBIG})


def is_disk_failure(exc: BaseException) -> bool:
    """True for a file error caused by the disk (full, failing) rather than by our code,
    and for an SQLite storage failure."""
    if isinstance(exc, OSError):
        return exc.errno in DISK_FAILURE_ERRNOS
    return is_storage_failure(exc)


def connect(path: Path | str, synchronous: str = "FULL") -> sqlite3.Connection:
    """Open a connection the way leasegate uses every connection.

    Autocommit mode (``isolation_level=None``): transactions are explicit, and
    writers take the lock up front with ``BEGIN IMMEDIATE``.
    """
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


# PRAGMA synchronous reads back as a number. In WAL mode FULL syncs the WAL at every
# commit; NORMAL only at checkpoints, so a power cut loses the last commits; OFF never.
_SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
_DURABLE_SYNCHRONOUS = 2


def sqlite_durability(conn: sqlite3.Connection) -> Durability:
    """The SQLite engine's answer to "is this storage durable?", from the connection."""
    level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    if level >= _DURABLE_SYNCHRONOUS:
        return Durability()
    name = _SYNCHRONOUS_NAMES.get(level, str(level))
    return Durability((f"sqlite_synchronous = {name} (FULL or EXTRA keeps the promise)",))


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; any exception rolls back and propagates."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def begin(conn: sqlite3.Connection) -> None:
    """Start a write transaction, taking the lock up front."""
    conn.execute("BEGIN IMMEDIATE")


def commit(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already done so."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def savepoint(conn: sqlite3.Connection, name: str) -> None:
    """Open a savepoint: a part of the transaction that can be undone alone.
    ``name`` is the caller's constant, never a client's."""
    conn.execute(f"SAVEPOINT {name}")


def release(conn: sqlite3.Connection, name: str) -> None:
    """Keep what was done since the savepoint ``name``."""
    conn.execute(f"RELEASE {name}")


def undo(conn: sqlite3.Connection, name: str) -> None:
    """Undo what was done since the savepoint ``name`` and close it."""
    conn.execute(f"ROLLBACK TO {name}")
    conn.execute(f"RELEASE {name}")


class Database:
    """A connection and the thread that owns it.

    ``Database(path)`` opens nothing; ``await db.start()`` starts the thread and
    connects on it (the connection lives and dies on that one thread), and
    ``await db.stop()`` closes it and joins the thread without blocking the
    event loop. :meth:`open` does both synchronously, for the command line and
    for tests.
    """

    def __init__(self, path: Path | str, synchronous: str = "FULL", *,
                 inline: bool = False) -> None:
        self.path = path
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._inline = inline
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._open_error: Exception | None = None

    @classmethod
    def open(cls, path: Path | str, synchronous: str = "FULL", *, inline: bool = False) -> Database:
        """A database connected now (blocking: not for the event loop)."""
        db = cls(path, synchronous, inline=inline)
        db._connect_here()
        if not inline:
            db._start_thread()
        return db

    async def start(self) -> None:
        """Connect, on the connection's own thread. Cancellation: shielded, like
        :meth:`run`; a failure to connect (a bad path, no space) propagates."""
        if self._inline:
            await trio.lowlevel.checkpoint()
            self._connect_here()
            return
        self._start_thread()
        await self.run(lambda _conn: None)

    def _connect_here(self) -> None:
        self._conn = connect(self.path, self.synchronous)

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="leasegate-sqlite",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            if self._conn is None:
                self._conn = connect(self.path, self.synchronous)
        except Exception as exc:  # every call fails as connecting did, until stop()
            self._open_error = exc
        while (job := self._jobs.get()) is not None:
            job()
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise self._open_error or sqlite3.OperationalError(
                f"the database {self.path} is not open")
        return self._conn

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` on the connection's thread and return its result.

        Cancellation: a caller cancelled before the call is handed over gets
        ``Cancelled`` and nothing runs. Once handed over, the call is shielded:
        ``fn`` always runs to completion and the caller waits for it, so a
        cancelled caller never leaves a transaction half-done or unreported.
        """
        if self._inline:
            await trio.lowlevel.checkpoint()
            return fn(self._connection())
        await trio.lowlevel.checkpoint_if_cancelled()
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[outcome.Outcome[T]] = []

        def job() -> None:
            box.append(outcome.capture(lambda: fn(self._connection())))
            token.run_sync_soon(done.set)

        self._jobs.put(job)
        with trio.CancelScope(shield=True):
            await done.wait()
        return box[0].unwrap()

    async def durability(self) -> Durability:
        """Whether this database keeps "durable before acknowledged" (see
        :mod:`leasegate.storage.durability`). Cancellation: as :meth:`run`."""
        return await self.run(sqlite_durability)

    def run_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` directly; only before the thread serves anyone, or inline."""
        return fn(self._connection())

    async def stop(self) -> None:
        """Close after the calls already queued, joining the thread off the event loop.
        Cancellation: shielded (a thread half-stopped helps nobody)."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.close)

    def close(self) -> None:
        """Stop the thread after the calls already queued; closes the connection.
        Blocking: from the event loop use :meth:`stop`."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
        elif self._conn is not None:
            self._conn.close()
        self._conn = None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<Database {self.path} inline={self._inline}>"
