"""One SQLite connection on one dedicated thread.

sqlite3 connections are thread-affine, so each :class:`Database` owns a thread
that runs every call for it, fed by a queue. Callers wait for their call even
when cancelled: a write that was handed to SQLite is finished (committed or
rolled back) before anyone is told anything, which is what "durable before
acknowledged" needs::

    db = Database.open(path, synchronous="FULL")
    count = await db.run(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0])

``inline=True`` runs the calls on the trio thread instead. Tests use it so
that the autojump clock never jumps while SQLite works (DESIGN.md §7).
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import outcome
import trio

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


class Database:
    """A connection and the thread that owns it."""

    def __init__(self, conn: sqlite3.Connection, *, inline: bool = False) -> None:
        self._conn = conn
        self._inline = inline
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        if not inline:
            self._thread = threading.Thread(
                target=self._serve, name="leasegate-sqlite", daemon=True
            )
            self._thread.start()

    @classmethod
    def open(cls, path: Path | str, synchronous: str = "FULL", *, inline: bool = False) -> Database:
        return cls(connect(path, synchronous), inline=inline)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            job()
        self._conn.close()

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` on the connection's thread and return its result.

        Cancellation: the call is shielded. Once handed over, ``fn`` always
        runs to completion and the caller waits for it, so a cancelled caller
        never leaves a transaction half-done or unreported.
        """
        if self._inline:
            await trio.lowlevel.checkpoint()
            return fn(self._conn)
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[outcome.Outcome[T]] = []

        def job() -> None:
            box.append(outcome.capture(fn, self._conn))
            token.run_sync_soon(done.set)

        self._jobs.put(job)
        with trio.CancelScope(shield=True):
            await done.wait()
        return box[0].unwrap()

    def run_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` directly; only before the thread serves anyone, or inline."""
        return fn(self._conn)

    def close(self) -> None:
        """Stop the thread after the calls already queued; closes the connection."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
        elif self._inline:
            self._conn.close()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<Database inline={self._inline}>"
