"""One database connection on one dedicated thread, whichever the engine.

Each :class:`ConnectionThread` owns a thread that runs every call for its connection,
fed by a queue: sqlite3 connections are thread-affine, and a psycopg connection runs one
statement at a time. Callers wait for their call even when cancelled: a write that was
handed to the database is finished (committed or rolled back) before anyone is told
anything, which is what "durable before acknowledged" needs.

``inline=True`` runs the calls on the trio thread instead. Tests use it so that the
autojump clock never jumps while the database works.

A connection whose commits do not sync (SQLite's commit pipeline, ``wal_sync``) still
returns from :meth:`run` only once a sync of the WAL covers what the call did;
:meth:`run_committed` returns at once with what to wait for instead (an actor's turn,
so that the next one applies meanwhile).

An engine subclasses it with :meth:`_connect` (and :meth:`_disconnect`); see
``connection.Database`` (SQLite) and ``postgres.database.Database``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import outcome
import trio

from leasegate.storage.wal_sync import Synced, WalSync, WalSyncFailed, durable

C = TypeVar("C")
T = TypeVar("T")


class ConnectionThread(Generic[C]):
    """A connection and the thread that owns it.

    Constructing one opens nothing; ``await db.start()`` starts the thread and connects
    on it (the connection lives and dies on that one thread), and ``await db.stop()``
    closes it and joins the thread without blocking the event loop. The engines'
    ``open`` classmethods do both synchronously, for the command line and for tests.
    """

    thread_name = "leasegate-storage"

    def __init__(self, *, inline: bool = False) -> None:
        self._conn: C | None = None
        self._inline = inline
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._open_error: Exception | None = None
        # Set (SQLite's pipeline) when commits do not sync: this syncs them.
        self._wal_sync: WalSync | None = None

    # ---- what an engine provides ------------------------------------------------------

    def _connect(self) -> C:
        raise NotImplementedError

    def _disconnect(self, conn: C) -> None:
        raise NotImplementedError

    def _not_open(self) -> Exception:
        """The error of a call while there is no connection and no error connecting."""
        return RuntimeError(f"{self!r} is not open")

    def _connection(self) -> C:
        """The connection for the next call (on the connection's thread)."""
        if self._conn is None:
            raise self._open_error or self._not_open()
        return self._conn

    # ---- life -------------------------------------------------------------------------

    def _open_now(self) -> None:
        """Connect now, on this thread (blocking), then serve calls from the
        connection's own thread unless inline."""
        self._conn = self._connect()
        if not self._inline:
            self._start_thread()

    async def start(self) -> None:
        """Connect, on the connection's own thread. Cancellation: shielded, like
        :meth:`run`; a failure to connect propagates."""
        if self._inline:
            await trio.lowlevel.checkpoint()
            self._conn = self._connect()
            return
        self._start_thread()
        await self.run(lambda _conn: None)

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._serve, name=self.thread_name,
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            if self._conn is None:
                self._conn = self._connect()
        except Exception as exc:  # every call fails as connecting did (see _connection)
            self._open_error = exc
        while (job := self._jobs.get()) is not None:
            job()
        if self._conn is not None:
            self._disconnect(self._conn)

    async def run(self, fn: Callable[[C], T]) -> T:
        """Run ``fn(connection)`` on the connection's thread and return its result,
        durable: with a commit pipeline, once a sync covers what ``fn`` did.

        Cancellation: a caller cancelled before the call is handed over gets
        ``Cancelled`` and nothing runs. Once handed over, the call is shielded:
        ``fn`` always runs to completion and the caller waits for it, so a
        cancelled caller never leaves a transaction half-done or unreported.
        """
        wal = self._wal_sync
        if self._inline:
            await trio.lowlevel.checkpoint()
            value = fn(self._connection())
            if wal is not None:
                wal.sync_now()
            return value
        await trio.lowlevel.checkpoint_if_cancelled()
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[outcome.Outcome[T]] = []
        failed: list[WalSyncFailed] = []

        def synced(error: WalSyncFailed | None) -> None:
            if error is not None:
                failed.append(error)
            token.run_sync_soon(done.set)

        def job() -> None:
            box.append(outcome.capture(lambda: fn(self._connection())))
            if wal is None:
                token.run_sync_soon(done.set)
            else:
                wal.after_sync(synced)

        self._jobs.put(job)
        with trio.CancelScope(shield=True):
            await done.wait()
        if failed:
            raise failed[0]
        return box[0].unwrap()

    async def run_committed(self, fn: Callable[[C], T]) -> tuple[T, Synced]:
        """As :meth:`run`, returning as soon as ``fn`` has returned (its COMMIT done),
        with what to wait for before anyone is told of it: already done unless the
        commits do not sync, else the pipeline's sync that covers ``fn``'s writes and
        every commit before them. Cancellation: as :meth:`run`."""
        wal = self._wal_sync
        if wal is None:
            return await self.run(fn), durable()
        if self._inline:
            await trio.lowlevel.checkpoint()
            value = fn(self._connection())
            return value, wal.request(None)
        await trio.lowlevel.checkpoint_if_cancelled()
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[outcome.Outcome[tuple[T, Synced]]] = []

        def job() -> None:
            def step() -> tuple[T, Synced]:
                value = fn(self._connection())
                return value, wal.request(token)  # queued right after the COMMIT

            box.append(outcome.capture(step))
            token.run_sync_soon(done.set)

        self._jobs.put(job)
        with trio.CancelScope(shield=True):
            await done.wait()
        return box[0].unwrap()

    def run_sync(self, fn: Callable[[C], T]) -> T:
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
            self._disconnect(self._conn)
        self._conn = None
