"""The system: every actor and background job in one nursery of our own.

Start-up opens one connection (and thread) per actor on the same database,
applies migrations, and starts the actors; :meth:`System.drain` and
:meth:`System.close` shut them down in the order DESIGN.md §7 asks for.
Actors never run in Quart's ``app.nursery``: a crash there would leave
hypercorn serving 500s, while here it takes the process down loudly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from leasegate.actors.keys import KeyStore
from leasegate.actors.queries import QueryQueue
from leasegate.actors.runtime import Actor, PeriodicJob
from leasegate.actors.task_messages import ExistingTasks
from leasegate.actors.tasks import TaskQueue
from leasegate.artifacts import ArtifactStore
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.connection import Database, transaction
from leasegate.storage.migrations import migrate

log = logging.getLogger("leasegate.system")


@dataclass
class BackgroundJob:
    """A periodic job that owns no tables (the rate-limit sweep, the artifact sweeps)."""

    owner: str
    job: PeriodicJob
    fn: Callable[[float], Awaitable[Any]]


class System:
    """The running gateway minus HTTP: actors, jobs, the clock, the settings."""

    def __init__(self, db_path: Path, settings: Settings, clock: Clock, *,
                 inline_storage: bool = False) -> None:
        self.db_path = db_path
        self.settings = settings
        self.clock = clock
        self._inline = inline_storage
        self._databases: list[Database] = []
        setup = self._open()
        setup.run_sync(migrate)
        self.probe_db = setup
        self.keys = KeyStore(self._open(), clock)
        self.queries = QueryQueue(self._open(), clock, settings)
        self.artifacts = ArtifactStore(db_path.parent / "artifacts")
        self.tasks = TaskQueue(self._open(), clock, settings, self.artifacts)
        self.background: list[BackgroundJob] = []
        self.add_background_job("artifacts", "sweep_staging", settings.housekeeping_interval,
                                self._sweep_staging)
        self.add_background_job("artifacts", "sweep_orphan_dirs",
                                settings.artifact_orphan_sweep_interval, self._sweep_orphans)
        self._closed = trio.Event()
        self._probed_at = -math.inf
        self._probe_ok = False

    def _open(self) -> Database:
        db = Database.open(self.db_path, self.settings.sqlite_synchronous, inline=self._inline)
        self._databases.append(db)
        return db

    @property
    def actors(self) -> list[Actor]:
        return [self.keys, self.queries, self.tasks]

    def add_background_job(self, owner: str, name: str, every: float,
                           fn: Callable[[float], Awaitable[Any]]) -> None:
        """Run ``await fn(now)`` every ``every`` seconds once the system runs."""
        self.background.append(
            BackgroundJob(owner, PeriodicJob(name, every, lambda _c, _n: None), fn))

    async def _sweep_staging(self, now: float) -> None:
        await self.artifacts.sweep_staging(now, self.settings.artifact_temp_max_age)

    async def _sweep_orphans(self, now: float) -> None:
        async def existing(task_ids: list[str]) -> set[str]:
            found: set[str] = await self.tasks.mailbox.ask(ExistingTasks(tuple(task_ids)))
            return found

        await self.artifacts.sweep_orphans(now, self.settings.artifact_orphan_max_age, existing)

    def jobs(self) -> Iterator[tuple[str, PeriodicJob]]:
        """Every periodic job with its owner, for /health and /metrics."""
        for actor in self.actors:
            for job in actor.jobs:
                yield actor.name, job
        for bg in self.background:
            yield bg.owner, bg.job

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run every actor and job until :meth:`close`; a crash in one ends all."""
        try:
            async with trio.open_nursery() as actors:
                for actor in self.actors:
                    await actors.start(actor.run)
                async with trio.open_nursery() as jobs:
                    for bg in self.background:
                        jobs.start_soon(self._run_background, bg)
                    jobs.start_soon(self.artifacts.run_deleter)
                    task_status.started()
                    await self._closed.wait()
                    jobs.cancel_scope.cancel()  # they hold nothing worth finishing
                # Each actor ends once it has applied what is already in its inbox.
                for actor in self.actors:
                    actor.close()
        finally:
            for db in self._databases:
                db.close()

    async def _run_background(self, bg: BackgroundJob) -> None:
        job = bg.job
        while True:
            job.next_at = self.clock.now() + job.every
            await trio.sleep_until(self.clock.deadline(job.next_at))
            now = self.clock.now()
            try:
                await bg.fn(now)
            except Exception:
                job.failed(now, self.settings.error_log_window, owner=bg.owner)
            else:
                job.succeeded(now)

    def drain(self) -> None:
        """Parked long-polls answer with an empty list; new ones are refused."""
        for actor in self.actors:
            actor.drain()

    def close(self) -> None:
        """Stop the actors once they have applied what is already in their inboxes."""
        self._closed.set()

    async def storage_writable(self) -> bool:
        """A real write and commit on the database, for /health (at most once a second:
        /health needs no key, so its cost must not be the caller's to choose)."""
        now = self.clock.now()
        if now - self._probed_at < 1.0:
            return self._probe_ok
        self._probed_at = now
        self._probe_ok = await self._probe()
        return self._probe_ok

    async def _probe(self) -> bool:
        def probe(conn: Any) -> None:
            with transaction(conn):
                conn.execute("PRAGMA user_version = " + str(
                    conn.execute("PRAGMA user_version").fetchone()[0]))
        try:
            await self.probe_db.run(probe)
        except Exception as exc:
            log.warning("storage probe failed: %s", exc)
            return False
        return True


def new_system(db_path: Path, settings: Settings, *, clock: Clock | None = None,
               inline_storage: bool = False) -> System:
    """Build a system; must be called inside ``trio.run`` (the clock needs it)."""
    return System(db_path, settings, clock or Clock(), inline_storage=inline_storage)
