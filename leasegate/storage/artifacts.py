"""Artifact files: ``<data>/artifacts/t_<task_id>/<name>@<sha256>``, staged first.

An upload streams into ``.staging/`` while it is hashed and counted (never
held in memory whole), is fsynced, and only then moved into place by the task
actor in the transaction that records it. Files are named by their content,
so a move whose transaction then rolls back never changes the bytes behind a
committed row: it only leaves an unreferenced file, removed with the task.

Deleting files never happens on an actor's message path (removing
a GB directory under the task lock once stalled the whole queue): purged
tasks' directories go to a deleter task that works in a thread, and two
sweeps catch what is left::

    store = ArtifactStore(Path("var/artifacts"))
    staged = await store.stage(request.body, limit=64 * 2**20)
    # ... the task actor calls store.place(staged.path.name, staged.sha256, task_id, name)
    store.discard_later(["t-1", "t-2"])   # after their rows were purged
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import trio

from leasegate.errors import PayloadTooLarge, Unavailable
from leasegate.logs import escape
from leasegate.storage.connection import is_disk_failure
from leasegate.storage.durable_files import make_dir_durably, replace_durably

log = logging.getLogger("leasegate.artifacts")

DELETE_QUEUE = 10_000
WRITE_BUFFER = 1024 * 1024  # bytes hashed and written per trip to a worker thread
DIR_PREFIX = "t_"  # never "." or "..": task ids may be made of dots


@dataclass(frozen=True)
class Staged:
    path: Path
    size: int
    sha256: str


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.staging = root / ".staging"
        self._doomed_send, self._doomed = trio.open_memory_channel[Path](DELETE_QUEUE)
        self.deleted = 0  # paths removed by the deleter

    def task_dir(self, task_id: str) -> Path:
        return self.root / f"{DIR_PREFIX}{task_id}"

    def path(self, task_id: str, name: str, sha256: str) -> Path:
        return self.task_dir(task_id) / f"{name}@{sha256}"

    async def stage(self, chunks: AsyncIterable[bytes], limit: int) -> Staged:
        """Stream ``chunks`` into a staging file; 413 past ``limit`` bytes, 503 (5030)
        when the disk is full or failing.

        Hashing and writing run in a worker thread, a buffer of up to
        :data:`WRITE_BUFFER` bytes at a time: the sha256 of 64 MiB is ~0.2 s of
        CPU that must not stall the event loop (hashlib drops the GIL).
        Cancellation (the client went away) or any error removes the file.
        """
        path = self.staging / secrets.token_hex(16)
        digest = hashlib.sha256()
        size = 0
        done = False
        try:
            out = await trio.to_thread.run_sync(self._open_staging, path)
            try:
                pending: list[bytes] = []
                buffered = 0
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLarge(f"artifact larger than {limit} bytes "
                                              "(max_artifact_bytes)")
                    pending.append(chunk)
                    buffered += len(chunk)
                    if buffered >= WRITE_BUFFER:
                        await trio.to_thread.run_sync(_write, out, digest, pending)
                        pending, buffered = [], 0
                await trio.to_thread.run_sync(_write, out, digest, pending, True)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(out.close)
            done = True
            return Staged(path, size, digest.hexdigest())
        except OSError as exc:
            if is_disk_failure(exc):
                raise Unavailable(f"could not store the artifact: {exc.strerror}") from exc
            raise
        finally:
            if not done:
                with trio.CancelScope(shield=True), contextlib.suppress(OSError):
                    await trio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))

    def _open_staging(self, path: Path) -> BinaryIO:
        # The file's own name needs no fsync: place() makes its final name durable.
        make_dir_durably(self.staging)
        return path.open("wb")

    def staged_path(self, staging_name: str) -> Path:
        """Where the upload staged under ``staging_name`` is (a name :meth:`stage` chose)."""
        if not staging_name or "/" in staging_name or staging_name.startswith("."):
            raise ValueError(f"not a staging name: {staging_name!r}")
        return self.staging / staging_name

    def place(self, staging_name: str, sha256: str, task_id: str, name: str) -> None:
        """Move a staged upload into place durably, before the row that names it commits:
        a rename and a directory fsync (one more for a task's first artifact, whose
        directory is new), on the actor's database thread. :meth:`stage` fsynced the
        bytes already, so the file fsync before the rename finds nothing to write."""
        target = self.path(task_id, name, sha256)
        make_dir_durably(target.parent)
        replace_durably(self.staged_path(staging_name), target)

    def discard_later(self, task_ids: list[str]) -> None:
        """Queue the directories of purged tasks for deletion; never blocks."""
        for task_id in task_ids:
            self._discard(self.task_dir(task_id))

    def discard_file_later(self, task_id: str, name: str, sha256: str) -> None:
        """Queue one superseded artifact file for deletion; never blocks."""
        self._discard(self.path(task_id, name, sha256))

    def _discard(self, path: Path) -> None:
        try:
            self._doomed_send.send_nowait(path)
        except trio.WouldBlock:
            # The orphan sweep (directories) or the task's purge (files) gets it later.
            log.warning("artifact deletion queue full; %s stays for now", escape(path))

    async def delete_next(self) -> bool:
        """Delete the next queued path, in a thread; False once the queue is closed.
        Run by the system's guarded runner: one failing deletion never stops the rest."""
        try:
            path = await self._doomed.receive()
        except trio.EndOfChannel:
            return False
        await trio.to_thread.run_sync(_remove, path)
        self.deleted += 1
        return True

    # Sweeps measure a file's age on the clock that stamped it: time.time(), read in
    # the thread that stats the file. The gateway's Clock runs on trio's monotonic
    # clock from a wall time taken at start-up, so after an NTP step or a suspend it
    # may be minutes or hours away from the st_mtime the kernel writes; mixing the
    # two could delete an upload in progress.

    async def sweep_staging(self, max_age: float) -> int:
        """Remove staging files older than ``max_age`` (uploads that never finished)."""
        def sweep() -> int:
            removed = 0
            if not self.staging.is_dir():
                return 0
            for entry in self.staging.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    if time.time() - entry.stat().st_mtime > max_age:
                        entry.unlink()
                        removed += 1
            return removed

        removed = await trio.to_thread.run_sync(sweep)
        if removed:
            log.info("removed %d unfinished uploads", removed)
        return removed

    async def sweep_orphans(self, max_age: float,
                            existing: Callable[[list[str]], Awaitable[set[str]]]) -> int:
        """Remove task directories with no task record that are older than ``max_age``
        (by their mtime, on the file system's clock: see above).

        Complements the purge, which is driven by task records: a directory whose
        record is gone (a crash before its deletion) is found only here.
        """
        def old_dirs() -> list[str]:
            if not self.root.is_dir():
                return []
            found = []
            for entry in self.root.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    if (entry.name.startswith(DIR_PREFIX) and entry.is_dir()
                            and time.time() - entry.stat().st_mtime > max_age):
                        found.append(entry.name.removeprefix(DIR_PREFIX))
            return found

        candidates = await trio.to_thread.run_sync(old_dirs)
        if not candidates:
            return 0
        alive = await existing(candidates)
        orphans = [task_id for task_id in candidates if task_id not in alive]
        for task_id in orphans:
            await trio.to_thread.run_sync(_remove, self.task_dir(task_id))
            log.info("removed orphan artifact directory of task %s", escape(task_id))
        return len(orphans)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write(out: BinaryIO, digest: Any, chunks: list[bytes], last: bool = False) -> None:
    """Hash and write ``chunks`` (in a worker thread); the last call also fsyncs."""
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)
    if last:
        out.flush()
        os.fsync(out.fileno())
