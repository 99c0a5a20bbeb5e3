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
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from leasegate.errors import PayloadTooLarge

log = logging.getLogger("leasegate.artifacts")

DELETE_QUEUE = 10_000
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
        """Stream ``chunks`` into a staging file; 413 past ``limit`` bytes.

        Cancellation (the client went away) or any error removes the file.
        """
        await trio.to_thread.run_sync(lambda: self.staging.mkdir(parents=True, exist_ok=True))
        path = self.staging / secrets.token_hex(16)
        digest = hashlib.sha256()
        size = 0
        done = False
        try:
            async with await trio.open_file(path, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLarge(f"artifact larger than {limit} bytes")
                    digest.update(chunk)
                    await out.write(chunk)
                await out.flush()
                await trio.to_thread.run_sync(os.fsync, out.fileno())
            done = True
            return Staged(path, size, digest.hexdigest())
        finally:
            if not done:
                with trio.CancelScope(shield=True), contextlib.suppress(OSError):
                    await trio.to_thread.run_sync(path.unlink)

    def staged_path(self, staging_name: str) -> Path:
        """Where the upload staged under ``staging_name`` is (a name :meth:`stage` chose)."""
        if not staging_name or "/" in staging_name or staging_name.startswith("."):
            raise ValueError(f"not a staging name: {staging_name!r}")
        return self.staging / staging_name

    def place(self, staging_name: str, sha256: str, task_id: str, name: str) -> None:
        """Move a staged upload into place (a rename: cheap, safe on the actor's path)."""
        target = self.path(task_id, name, sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.staged_path(staging_name), target)

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
            log.warning("artifact deletion queue full; %s stays for now", path)

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

    async def sweep_staging(self, now: float, max_age: float) -> int:
        """Remove staging files older than ``max_age`` (uploads that never finished)."""
        def sweep() -> int:
            removed = 0
            if not self.staging.is_dir():
                return 0
            for entry in self.staging.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    if now - entry.stat().st_mtime > max_age:
                        entry.unlink()
                        removed += 1
            return removed

        removed = await trio.to_thread.run_sync(sweep)
        if removed:
            log.info("removed %d unfinished uploads", removed)
        return removed

    async def sweep_orphans(self, now: float, max_age: float,
                            existing: Callable[[list[str]], Awaitable[set[str]]]) -> int:
        """Remove task directories with no task record that are older than ``max_age``.

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
                            and now - entry.stat().st_mtime > max_age):
                        found.append(entry.name.removeprefix(DIR_PREFIX))
            return found

        candidates = await trio.to_thread.run_sync(old_dirs)
        if not candidates:
            return 0
        alive = await existing(candidates)
        orphans = [task_id for task_id in candidates if task_id not in alive]
        for task_id in orphans:
            await trio.to_thread.run_sync(_remove, self.task_dir(task_id))
            log.info("removed orphan artifact directory of task %s", task_id)
        return len(orphans)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
