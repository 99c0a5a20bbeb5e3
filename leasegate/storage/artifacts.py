"""Artifact files: ``<data>/artifacts/t_<task_id>/<name>@<sha256>``, staged first.

An upload streams into ``.staging/`` while it is hashed and counted (never
held in memory whole), is fsynced, and only then moved into place by the task
actor in the transaction that records it. Files are named by their content,
so a move whose transaction then rolls back never changes the bytes behind a
committed row: it only leaves an unreferenced file, removed with the task.

Deleting files never happens on an actor's message path (removing
a GB directory under the task lock once stalled the whole queue): purged
tasks' directories go to a deleter task that works in a thread, and two
sweeps catch what is left. A path that cannot be removed never stops the rest:
the deleter tries it again with backoff (:data:`DELETE_ATTEMPTS` in all), then
gives up on it with one line at ERROR (at most one per ``error_log_window``)
and counts it (``delete_failures``, in ``/metrics``); a sweep skips it, counts
it, and finds it again on its next run::

    store = ArtifactStore(Path("var/artifacts"))
    staged = await store.stage(request.body, limit=64 * 2**20)
    # ... the task actor calls store.place(staged.path.name, staged.sha256, task_id, name)
    store.discard_later(["t-1", "t-2"])   # after their rows were purged
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import math
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
from leasegate.logs import Throttled, escape
from leasegate.storage.connection import is_disk_failure
from leasegate.storage.durable_files import make_dir_durably, replace_durably

log = logging.getLogger("leasegate.artifacts")

DELETE_QUEUE = 10_000
DELETE_ATTEMPTS = 4  # tries of one deletion in all, before it is given up (and logged)
DELETE_BACKOFF = 1.0  # seconds before the first retry, doubled for each next one
WRITE_BUFFER = 1024 * 1024  # bytes hashed and written per trip to a worker thread
DIR_PREFIX = "t_"  # never "." or "..": task ids may be made of dots


@dataclass(frozen=True)
class Staged:
    path: Path
    size: int
    sha256: str


Remover = Callable[[Path], None]


def remove_path(path: Path) -> None:
    """Remove a file, or a directory and everything in it; a path already gone is
    done. Raises OSError when something stays (a sweep or the deleter decides)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


class ArtifactStore:
    """``remove`` deletes a path (in a worker thread): :func:`remove_path`, or a
    stand-in that fails on purpose (tests)."""

    def __init__(self, root: Path, *, error_log_window: float = 600.0,
                 remove: Remover = remove_path) -> None:
        self.root = root
        self.staging = root / ".staging"
        self.remove = remove
        self._doomed_send, self._doomed = trio.open_memory_channel[Path](DELETE_QUEUE)
        # Failed deletions waiting for their retry: (due, sequence, attempt, path).
        self._retries: list[tuple[float, int, int, Path]] = []
        self._retry_sequence = 0
        self.deleted = 0  # paths removed by the deleter
        # Paths not removed, by who gave up: the deleter (after its retries), a sweep.
        self.delete_failures = {"deleter": 0, "staging_sweep": 0, "orphan_sweep": 0}
        self._failure_log = {by: Throttled(log, error_log_window) for by in self.delete_failures}

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
        """Delete the next queued path, or the next failed one whose retry is due, in a
        thread; False once the queue is closed. Run by the system's guarded runner."""
        doomed = await self._next_doomed()
        if doomed is None:
            return False
        attempt, path = doomed
        try:
            await trio.to_thread.run_sync(self.remove, path)
        except OSError as exc:
            if attempt < DELETE_ATTEMPTS and len(self._retries) < DELETE_QUEUE:
                due = trio.current_time() + DELETE_BACKOFF * 2 ** (attempt - 1)
                self._retry_sequence += 1
                heapq.heappush(self._retries, (due, self._retry_sequence, attempt + 1, path))
            else:
                self._gave_up("deleter", 1, path, exc, f"after {attempt} attempts; the "
                              "orphan sweep or the task's purge may remove it later")
        else:
            self.deleted += 1
        return True

    async def _next_doomed(self) -> tuple[int, Path] | None:
        """(attempt, path): a due retry first, else the next queued path as soon as one
        comes (or a retry falls due); None once the queue is closed."""
        while True:
            if self._retries and self._retries[0][0] <= trio.current_time():
                _, _, attempt, path = heapq.heappop(self._retries)
                return attempt, path
            with trio.move_on_at(self._retries[0][0] if self._retries else math.inf):
                try:
                    return 1, await self._doomed.receive()
                except trio.EndOfChannel:
                    return None

    def _gave_up(self, by: str, n: int, path: Path, exc: OSError, then: str) -> None:
        """Count ``n`` paths ``by`` could not remove; one line per error_log_window."""
        self.delete_failures[by] += n
        self._failure_log[by].error(
            trio.current_time(), "%s could not delete %d path(s), e.g. %s: %s; %s", by, n,
            escape(path), escape(exc), then)

    # Sweeps measure a file's age on the clock that stamped it: time.time(), read in
    # the thread that stats the file. The gateway's Clock runs on trio's monotonic
    # clock from a wall time taken at start-up, so after an NTP step or a suspend it
    # may be minutes or hours away from the st_mtime the kernel writes; mixing the
    # two could delete an upload in progress.

    async def sweep_staging(self, max_age: float) -> int:
        """Remove staging files older than ``max_age`` (uploads that never finished);
        one that cannot be removed is skipped (counted, logged) and tried next time."""
        def sweep() -> tuple[int, int, tuple[Path, OSError] | None]:
            removed, failed = 0, 0
            example: tuple[Path, OSError] | None = None
            if not self.staging.is_dir():
                return 0, 0, None
            for entry in self.staging.iterdir():
                try:
                    if time.time() - entry.stat().st_mtime > max_age:
                        self.remove(entry)
                        removed += 1
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    failed += 1
                    example = example or (entry, exc)
            return removed, failed, example

        removed, failed, example = await trio.to_thread.run_sync(sweep)
        if removed:
            log.info("removed %d unfinished uploads", removed)
        if example is not None:
            self._gave_up("staging_sweep", failed, *example, "the next sweep tries again")
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
        removed = 0
        for task_id in orphans:
            path = self.task_dir(task_id)
            try:
                await trio.to_thread.run_sync(self.remove, path)
            except OSError as exc:
                self._gave_up("orphan_sweep", 1, path, exc, "the next sweep tries again")
            else:
                removed += 1
                log.info("removed orphan artifact directory of task %s", escape(task_id))
        return removed


def _write(out: BinaryIO, digest: Any, chunks: list[bytes], last: bool = False) -> None:
    """Hash and write ``chunks`` (in a worker thread); the last call also fsyncs."""
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)
    if last:
        out.flush()
        os.fsync(out.fileno())
