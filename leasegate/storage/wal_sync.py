"""The commit pipeline: SQLite commits without syncing, one thread syncs the WAL for
them all, and nobody is answered before the sync that covers their commit returns.

With ``synchronous = FULL`` SQLite syncs the WAL inside ``COMMIT``, holding the
database's one write lock: every other turn (of any actor) waits for the disk. With
``NORMAL`` in WAL mode ``COMMIT`` only writes the frames and releases the lock; this
module then syncs the ``-wal`` file on a thread of its own, one ``fsync`` for every
commit queued while the previous one ran, and only after it returns is a commit
acknowledged::

    wal = WalSync(db_file)                   # one per database file, for every connection
    synced = wal.request(trio_token)         # on the connection's thread, right after COMMIT
    ...                                      # the next turn applies meanwhile
    await synced.wait()                      # durable now: answer the callers

Why this keeps "durable before acknowledged" (SQLite's ``wal.c``, ``pager.c``):

* an ``fsync`` of the file makes every byte written to it before the call durable,
  whichever descriptor (or connection) wrote it; a commit's frames are written before
  its ``COMMIT`` returns, and a request is queued after that, so the sync that takes
  the request covers the commit **and every commit before it** (the WAL is recovered
  as a prefix: frames after a lost one are lost too, and a commit another turn read
  was written before the reader's own frames);
* ``NORMAL`` still syncs where SQLite's own safety needs it: the WAL header after a
  restart (before new frames may overwrite old ones), the WAL before a checkpoint
  copies it, and the database file after (``CKPT_SYNC_FLAGS``). So when the WAL is
  restarted or truncated after a checkpoint, what it held is already durable in the
  database file;
* the ``-wal`` file is opened again for every sync, so a WAL deleted (SQLite deletes
  it when the last connection closes, after a full checkpoint) and created anew is
  never missed through a stale descriptor; a WAL that is gone was checkpointed, and
  then the database file is synced instead.

A failed ``fsync`` leaves the page cache in a state nobody knows (Linux may drop the
dirty pages and report success the next time), so it is final: every sync after it
fails too (:class:`WalSyncFailed`), and the gateway stops rather than acknowledge
anything more (a restart recovers from what the disk holds), as PostgreSQL does.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path

import trio

log = logging.getLogger("leasegate.storage")

Fsync = Callable[[int], None]


class WalSyncFailed(RuntimeError):
    """The WAL could not be synced: commits since the last good sync may be lost at a
    power cut, so nothing may be acknowledged any more."""


class Synced:
    """One commit's wait for the sync that covers it. Its state changes on the trio
    thread only (:meth:`finish`, through ``run_sync_soon``)."""

    __slots__ = ("_event", "done", "error", "on_done")

    def __init__(self, *, done: bool = False) -> None:
        self.done = done
        self.error: WalSyncFailed | None = None
        self.on_done: Callable[[], None] | None = None  # called once, when done
        self._event: trio.Event | None = None

    def finish(self, error: WalSyncFailed | None) -> None:
        self.done, self.error = True, error
        if self._event is not None:
            self._event.set()
        if self.on_done is not None:
            self.on_done()

    def check(self) -> None:
        """Raise :class:`WalSyncFailed` if the sync failed; call once :attr:`done`."""
        if self.error is not None:
            raise self.error

    async def wait(self) -> None:
        """Until the commit is durable; :class:`WalSyncFailed` if it cannot be."""
        if not self.done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        else:
            await trio.lowlevel.checkpoint()
        self.check()


def durable() -> Synced:
    """What a commit that is already durable waits for: nothing (PostgreSQL, which
    flushes its WAL before COMMIT returns; SQLite syncing inside COMMIT)."""
    return Synced(done=True)


class WalSync:
    """The thread that syncs one SQLite database's WAL for every connection to it in
    this process (see the module docstring). ``fsync`` is ``fdatasync``, the call
    SQLite's own FULL makes on Linux (it flushes the data and the size), or a test's
    hook; ``inline``: sync on the caller's thread (tests on the trio thread)."""

    def __init__(self, db_file: Path | str, *, fsync: Fsync = os.fdatasync,
                 inline: bool = False) -> None:
        self.db_file = Path(db_file)
        self.wal_file = Path(f"{db_file}-wal")
        self.fsync = fsync
        self._inline = inline
        self._requests: queue.SimpleQueue[Callable[[WalSyncFailed | None], None] | None] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None
        self._failed: WalSyncFailed | None = None
        self.syncs = 0  # fsyncs made (read on any thread: a figure, not a decision)
        self.commits = 0  # the requests they covered

    def request(self, token: trio.lowlevel.TrioToken | None) -> Synced:
        """Ask for a sync covering everything written so far; call right after COMMIT,
        on the connection's thread (inline: on the trio thread, ``token`` None, and
        the sync is made now)."""
        synced = Synced()
        if self._inline or token is None:
            synced.finish(self._sync_now(1))
            return synced
        self.after_sync(lambda error: token.run_sync_soon(synced.finish, error))
        return synced

    def start(self) -> None:
        """Start the sync thread, if not yet (each database does as it opens, one
        after the other: never from two threads at once)."""
        if self._thread is None and not self._inline:
            self._thread = threading.Thread(target=self._serve, name="leasegate-wal-sync",
                                            daemon=True)
            self._thread.start()

    def after_sync(self, then: Callable[[WalSyncFailed | None], None]) -> None:
        """Call ``then(error)`` on the sync thread once a sync that began after this
        call has returned (``error`` None) or failed (inline: now, on this thread)."""
        if self._thread is None:
            then(self._sync_now(1))
            return
        self._requests.put(then)

    def sync_now(self) -> None:
        """Sync on this thread (blocking); :class:`WalSyncFailed` if it fails."""
        error = self._sync_now(1)
        if error is not None:
            raise error

    def _serve(self) -> None:
        while (first := self._requests.get()) is not None:
            waiting = [first]
            stop = False
            while True:  # every request queued by now: one sync covers them all
                try:
                    more = self._requests.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                waiting.append(more)
            error = self._sync_now(len(waiting))
            for then in waiting:
                then(error)
            if stop:
                return

    def _sync_now(self, commits: int) -> WalSyncFailed | None:
        if self._failed is None:
            try:
                self._fsync_wal()
            except OSError as exc:
                self._failed = WalSyncFailed(f"the WAL {self.wal_file} could not be synced: "
                                             f"{exc}; stopping: writes since the last sync "
                                             "may not be on disk")
                log.critical("%s", self._failed)
            self.syncs += 1
            self.commits += commits
        return self._failed

    def _fsync_wal(self) -> None:
        try:
            fd = os.open(self.wal_file, os.O_RDONLY)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            # No WAL: SQLite checkpointed it into the database file and deleted it.
            fd = os.open(self.db_file, os.O_RDONLY)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Stop the thread after the requests already queued (blocking)."""
        if self._thread is not None:
            self._requests.put(None)
            self._thread.join()
            self._thread = None
