"""The system: every actor and background job in one nursery of our own.

One supervision policy for all of it::

    async with open_system(db_path, settings) as system:
        view = await system.tasks.ask(GetTask("t1"))
        ...
    # on exit: actors drained of what they hold, connections closed, threads joined

Start-up connects one database per actor, each on its own thread, applies the
migrations and starts the actors; nothing blocking runs on the event loop
(connecting, migrating and joining threads happen on the databases' threads
or in ``trio.to_thread``). Every background job runs under one guarded
runner: it fails alone, logs at most once per ``error_log_window``, and runs
again. Readers (``/health``, ``/metrics``, the admin routes) see the actors
only through :meth:`System.statistics`, a snapshot taken on the trio thread.

Actors never run in Quart's ``app.nursery``: a crash there would leave
hypercorn serving 500s, while here it takes the process down loudly.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from leasegate.actors.devices import Devices, DevicesRef
from leasegate.actors.devices.actor import open_devices
from leasegate.actors.event_stream import EventHub, JobEvent
from leasegate.actors.jobs import Jobs
from leasegate.actors.keys import KeysRef
from leasegate.actors.keys.actor import open_keys
from leasegate.actors.keys.turn import Revoked
from leasegate.actors.keys.watch import RevocationWatch
from leasegate.actors.ledger import Ledger, LedgerRef
from leasegate.actors.ledger.actor import open_ledger
from leasegate.actors.ledger.audit import LedgerUnbalanced, audit
from leasegate.actors.ledger.views import AuditReport
from leasegate.actors.other_gateways import OtherGateways
from leasegate.actors.queries import Queries, QueriesRef
from leasegate.actors.queries.actor import open_queries
from leasegate.actors.queue.history import committed_after
from leasegate.actors.runtime.actor import Actor, ActorStatistics, Inbox
from leasegate.actors.runtime.background import BackgroundJob
from leasegate.actors.runtime.periodic import (
    JobRecord,
    JobStatistics,
    serve_guarded,
)
from leasegate.actors.schedules import SchedulesRef
from leasegate.actors.schedules.actor import open_schedules
from leasegate.actors.tasks import Tasks, TasksRef
from leasegate.actors.tasks.actor import open_tasks
from leasegate.actors.tasks.artifacts import Upload
from leasegate.actors.tasks.reads import ExistingTasks
from leasegate.actors.webhooks import WebhooksRef
from leasegate.actors.webhooks.actor import open_webhooks
from leasegate.actors.webhooks.deliveries import Bell
from leasegate.clock import Clock
from leasegate.errors import StateConflict, Unavailable
from leasegate.logs import Throttled
from leasegate.settings import Settings
from leasegate.storage import events_sql
from leasegate.storage.artifacts import ArtifactStore
from leasegate.storage.backup import backup
from leasegate.storage.connection import is_disk_failure, transaction
from leasegate.storage.database import Database, database_at, migrate
from leasegate.storage.durability import Durability, ReportsDurability, admit
from leasegate.storage.engine import Connection
from leasegate.storage.notices_sql import notify
from leasegate.storage.probe import probe_write
from leasegate.storage.wal_sync import WalSync

log = logging.getLogger("leasegate.system")

POSTGRES_BACKUP = ("the database is PostgreSQL: back it up with pg_dump (e.g. pg_dump "
                   "--format=custom --file=leasegate.dump DBNAME) and restore it with "
                   "pg_restore; leasegate backup copies SQLite files only")


def default_gateway_name() -> str:
    """This process's name among the gateways of one database when the ``gateway``
    setting is unset (``serve`` names it ``<hostname>:<port>``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class SystemStatistics:
    """A snapshot of every actor, every periodic job and every one that runs on demand
    (``services``: work that runs when it comes, such as file deletions, or when a
    deadline in the data comes, such as the task actor's lease and timeout timer)."""

    actors: tuple[ActorStatistics, ...]
    jobs: tuple[JobStatistics, ...]
    services: tuple[JobStatistics, ...]
    draining: bool


@dataclass(frozen=True)
class BackupMade:
    path: str
    bytes: int


class System:
    """The running gateway minus HTTP: actors, jobs, the clock, the settings.

    Constructing it opens nothing; :meth:`run` (or :func:`open_system`) does.
    """

    def __init__(self, db_path: Path, settings: Settings, clock: Clock, *,
                 inline_storage: bool = False, allow_unbalanced: bool = False) -> None:
        self.db_path = db_path  # SQLite's file; its folder is the data directory
        self.settings = settings
        self.gateway = settings.gateway or default_gateway_name()
        self.clock = clock
        self._inline = inline_storage
        self.allow_unbalanced = allow_unbalanced
        self._draining = False  # set by drain(); read by every request (a flag, not a walk)
        self._databases: list[Database] = []
        # SQLite's commit pipeline: one WAL sync for every connection to the file.
        self._wal_sync = (WalSync(db_path, inline=inline_storage)
                          if settings.database_url is None and settings.sqlite_commit_pipeline
                          else None)
        self._setup = self._database("setup")
        # Every inbox first, so that each actor is opened with the refs it tells or
        # asks (the queues tell the ledger; the ledger tells the queues, never asks
        # them; the tracker asks the task actor): nothing is wired afterwards.
        tasks, queries, ledger = Inbox(Tasks), Inbox(Queries), Inbox(Ledger)
        devices = Inbox(Devices)
        self.tasks: TasksRef = tasks.ref
        self.queries: QueriesRef = queries.ref
        self.ledger: LedgerRef = ledger.ref
        self.devices: DevicesRef = devices.ref
        # Job events: written by the queues, streamed from here after their commits (on
        # PostgreSQL, read back from the table: every gateway's, in commit order).
        shared = settings.database_url is not None
        self._events_db = self._database("events") if shared else None
        self._commit_order = events_sql.CommitOrder()
        self.events = EventHub(settings.event_ring_size, settings.event_max_streams,
                               tail=self._tail_events if shared else None,
                               head=self._head_event_id if shared else None,
                               error_log_window=settings.error_log_window)
        artifacts_dir = (Path(settings.artifacts_dir) if settings.artifacts_dir
                         else db_path.parent / "artifacts")
        self.artifacts = ArtifactStore(artifacts_dir,
                                       error_log_window=settings.error_log_window)
        # The actors themselves: for their statistics, shutdown and tests; everyone
        # else holds their refs.
        self.key_actor = open_keys(self._database("keys"), clock)
        self.keys: KeysRef = self.key_actor.ref
        # Revocations by another process (the CLI; on PostgreSQL another gateway too):
        # notified on PostgreSQL, read every key_revocation_poll_interval on SQLite.
        self.revocations = (RevocationWatch(self.keys) if shared else RevocationWatch(
            self.keys, settings.key_revocation_poll_interval, _file_changed(
                db_path.with_name(db_path.name + "-wal"))))
        self.ledger_actor = open_ledger(self._database("ledger"), clock, settings, inbox=ledger,
                                        queues={"task": self.tasks, "query": self.queries})
        self.query_actor = open_queries(self._database("queries"), clock, settings, inbox=queries,
                                        ledger=self.ledger, events=self.events,
                                        presence=self.tasks)
        self.task_actor = open_tasks(self._database("tasks"), clock, settings, self.artifacts,
                                     inbox=tasks, ledger=self.ledger, events=self.events)
        self.device_actor, self._forwarder = open_devices(
            self._database("devices"), clock, settings, inbox=devices, tasks=self.tasks)
        # Webhooks: endpoints and deliveries; the queues write deliveries with the
        # transitions (the outbox) and ring the deliverer's bell after their commits.
        self.webhook_actor = open_webhooks(self._database("webhooks"), clock, settings)
        self.webhooks: WebhooksRef = self.webhook_actor.ref
        self.webhook_bell = Bell()
        for queue in (self.task_actor, self.query_actor):
            queue.turn.history.outbox_written = self.webhook_bell.ring
        # Tasks and queries as routes use them: the submit saga, billing in every view.
        self.jobs = Jobs(tasks=self.tasks, queries=self.queries, ledger=self.ledger,
                         max_wait=settings.max_wait_seconds)
        # Recurring schedules: the actor claims each fire, its submitter submits it.
        self.schedule_actor, self._submitter = open_schedules(
            self._database("schedules"), clock, settings, jobs=self.jobs)
        self.schedules: SchedulesRef = self.schedule_actor.ref
        self.elsewhere = self._open_elsewhere(settings, inline_storage)
        self._background: list[BackgroundJob] = []
        self._schedule_housekeeping(settings)
        self._deleter = JobRecord("delete_files", owner="artifacts", every=math.inf)
        self._added_services: list[tuple[JobRecord, Callable[[], Awaitable[None]]]] = []
        # Work that comes when it comes (a revocation to look for, a fire to submit).
        window = settings.error_log_window
        for record, step in ((self.revocations.record, self.revocations.check_next),
                             (self._submitter.record, self._submitter.submit_next)):
            self.add_service(record, functools.partial(serve_guarded, record, clock, window,
                                                       step))
        self._closed = trio.Event()
        self._probed_at = -math.inf
        self._probe_ok = False
        # The storage's answer at start-up (None until then), for /health and /metrics.
        self.durability: Durability | None = None
        # One throttle for every "the disk is failing" line of the system: a full
        # disk under load must not write a line per request.
        self._disk = Throttled(log, settings.error_log_window)

    def _open_elsewhere(self, settings: Settings, inline_storage: bool) -> OtherGateways:
        """Several gateways on one database: wake-ups and events cross between them (on
        SQLite, one gateway: nothing crosses)."""
        elsewhere = OtherGateways(f"{self.gateway}/{secrets.token_hex(4)}", {
            "tasks": self.tasks, "queries": self.queries}, heard_any=self.events.poke,
            others={"keys": self.revocations.poke})
        if settings.database_url is not None:
            elsewhere.listen(settings.database_url, f"leasegate listener ({self.gateway})",
                             settings.error_log_window, inline=inline_storage)
            notices = self._database("notices")  # each send its own short transaction
            elsewhere.send_with(lambda sent: notices.run(lambda conn: notify(conn, sent)),
                                settings.error_log_window)
            self.task_actor.announce = elsewhere.announcer("tasks")
            self.query_actor.announce = elsewhere.announcer("queries")
        return elsewhere

    def _schedule_housekeeping(self, settings: Settings) -> None:
        """The system's own periodic jobs, and this gateway's name on every actor's."""
        self.add_background_job("artifacts", "sweep_staging", settings.housekeeping_interval,
                                self._sweep_staging, shared=True)
        self.add_background_job("artifacts", "sweep_orphan_dirs",
                                settings.artifact_orphan_sweep_interval, self._sweep_orphans,
                                shared=True)
        # Every actor's periodic job is the database's: claimed, run by one gateway.
        for actor in self.actors:
            for job in actor.jobs:
                job.record.gateway = self.gateway
        if settings.database_url is not None:  # another gateway's turns set deadlines too
            for timed in (self.task_actor, self.query_actor, self.device_actor,
                          self.schedule_actor):
                timed.deadline_poll = settings.deadline_poll_interval
            # Site controls another gateway set: this gateway's memory, so each its own.
            self.add_background_job("sites", "reload_site_controls",
                                    settings.deadline_poll_interval, self.jobs.sites.reload)

    async def _tail_events(self, after: int, limit: int) -> tuple[list[JobEvent], bool]:
        assert self._events_db is not None
        order = self._commit_order
        return await self._events_db.run(lambda conn: committed_after(conn, order, after, limit))

    async def _head_event_id(self) -> int:
        assert self._events_db is not None
        return await self._events_db.run(events_sql.last_event_id)

    def _database(self, user: str) -> Database:
        """A connection of its own for ``user`` (an actor, or the system's set-up), to
        the SQLite file or to the PostgreSQL database of ``database_url``."""
        db = database_at(self.settings.database_url, self.db_path,
                         synchronous=self.settings.sqlite_synchronous, inline=self._inline,
                         name=f"leasegate {user} ({self.gateway})", wal_sync=self._wal_sync)
        self._databases.append(db)
        return db

    @property
    def actors(self) -> tuple[Actor[Any, Any], ...]:
        return (self.key_actor, self.ledger_actor, self.query_actor, self.task_actor,
                self.device_actor, self.schedule_actor, self.webhook_actor)

    def add_background_job(self, owner: str, name: str, every: float,
                           fn: Callable[[float], Awaitable[object]], *,
                           shared: bool = False) -> None:
        """Run ``await fn(now)`` every ``every`` seconds once the system runs; ``shared``:
        only the runs this gateway claims (see ``periodic_sql``), for work on what every
        gateway of the database shares. Unshared: this gateway's own (its memory)."""
        record = JobRecord(name, owner=owner, every=every)
        if shared:
            record.gateway = self.gateway
        self._background.append(BackgroundJob(record, fn, shared))

    def add_service(self, record: JobRecord, run: Callable[[], Awaitable[None]]) -> None:
        """Run ``await run()`` beside the actors once the system runs (work that comes
        when it comes, such as webhook deliveries: ``record`` counts its runs, never
        overdue); cancelled when the system closes."""
        self._added_services.append((record, run))

    # ---- what the HTTP layer may use ---------------------------------------------

    def on_key_revoked(self, listener: Revoked) -> None:
        """Call ``listener(key_ids)`` once keys are revoked (through this gateway, or
        found revoked by another process), after the commit, before the revoker's reply."""
        self.key_actor.turn.on_revoked.append(listener)

    def statistics(self) -> SystemStatistics:
        """Every actor's and job's counters, as of now (call on the trio thread)."""
        actors = tuple(actor.statistics() for actor in self.actors)
        jobs = [job for stats in actors for job in stats.jobs]
        jobs += [bg.record.statistics() for bg in self._background]
        services = tuple(record.statistics() for record in self._services)
        return SystemStatistics(actors, tuple(jobs), services, self.draining)

    @property
    def _services(self) -> tuple[JobRecord, ...]:
        """The on-demand work (no fixed interval: never overdue)."""
        return (self._deleter, self.task_actor.turn.deadline_timer, self._forwarder.record,
                self.schedule_actor.turn.timer,
                *(record for record, _ in self._added_services))

    def _job_records(self) -> list[JobRecord]:
        records = [job.record for actor in self.actors for job in actor.jobs]
        return [*records, *(bg.record for bg in self._background), *self._services]

    async def stage_upload(self, chunks: AsyncIterable[bytes]) -> Upload:
        """Stream an artifact upload to the staging area (413 past the limit; 503 when
        the disk is full or failing, logged at most once per ``error_log_window``)."""
        try:
            staged = await self.artifacts.stage(chunks, self.settings.max_artifact_bytes)
        except Unavailable as exc:
            self._disk.warning(self.clock.now(), "artifact storage failing: %s",
                               exc.__cause__ or exc)
            raise
        return Upload(staged.path.name, staged.size, staged.sha256)

    async def discard_upload(self, upload: Upload) -> None:
        """Remove a staged upload that was not placed (refused, failed, cancelled).
        Cancellation: shielded; an error is ignored (the staging sweep gets it later)."""
        path = self.artifacts.staged_path(upload.staging_name)
        with trio.CancelScope(shield=True), contextlib.suppress(OSError):
            await trio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))

    def artifact_path(self, task_id: str, name: str, sha256: str) -> Path:
        return self.artifacts.path(task_id, name, sha256)

    async def backup(self) -> BackupMade:
        """A consistent online copy of the whole database under ``<data>/backups``
        (SQLite; on PostgreSQL, 409: that is pg_dump's job)."""
        if self.settings.database_url is not None:
            raise StateConflict(POSTGRES_BACKUP)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock.now()))
        out = self.db_path.parent / "backups" / f"leasegate-{stamp}.db"
        try:
            size = await trio.to_thread.run_sync(backup, self.db_path, out)
        except Exception as exc:
            if not is_disk_failure(exc):
                raise
            self._disk.warning(self.clock.now(), "backup failed, storage failing: %s", exc)
            raise Unavailable(f"the backup could not be written: {exc}") from exc
        return BackupMade(str(out), size)

    async def storage_writable(self) -> bool:
        """A real write and commit on the database, for /health (at most once a second:
        /health needs no key, so its cost must not be the caller's to choose)."""
        now = self.clock.now()
        if now - self._probed_at < 1.0:
            return self._probe_ok
        self._probed_at = now
        try:
            await self._setup.run(probe_write)
        except Exception as exc:
            self._disk.warning(now, "storage probe failed: %s", exc)
            self._probe_ok = False
        else:
            self._probe_ok = True
            self._disk.recovered("storage probe: the database is writable again")
        return self._probe_ok

    # ---- running -----------------------------------------------------------------

    async def _sweep_staging(self, now: float) -> None:
        await self.artifacts.sweep_staging(self.settings.artifact_temp_max_age)

    async def _sweep_orphans(self, now: float) -> None:
        async def existing(task_ids: list[str]) -> set[str]:
            return set(await self.tasks.ask(ExistingTasks(tuple(task_ids))))

        await self.artifacts.sweep_orphans(self.settings.artifact_orphan_max_age, existing)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the databases, migrate, and run every actor and job until :meth:`close`;
        a crash in one ends all. The databases are closed (threads joined off the
        event loop) however it ends."""
        try:
            for db in self._databases:
                await db.start()
            await self._admit_storage(self._setup)  # opened as all the others are
            await self._setup.run(migrate)
            if not self.events.tailing:  # on PostgreSQL its first reader waits instead
                self.events.start(await self._setup.run(events_sql.last_event_id))
            await self._audit_ledger()
            async with trio.open_nursery() as actors:
                for actor in self.actors:
                    await actors.start(actor.run)
                await self.jobs.sites.start()  # paused sites stay paused on both channels
                # A job that has never run is overdue three intervals after this.
                started = self.clock.now()
                for record in self._job_records():
                    record.started_at = started
                async with trio.open_nursery() as jobs:
                    window = self.settings.error_log_window
                    for bg in self._background:
                        jobs.start_soon(bg.runner(self.clock, window, self._setup))
                    jobs.start_soon(serve_guarded, self._deleter, self.clock, window,
                                    self.artifacts.delete_next)
                    jobs.start_soon(self.events.run)
                    if self.settings.database_url is not None:
                        jobs.start_soon(self.elsewhere.run)
                    jobs.start_soon(serve_guarded, self._forwarder.record, self.clock, window,
                                    self._forwarder.forward_next)
                    for _, service in self._added_services:
                        jobs.start_soon(service)
                    task_status.started()
                    await self._closed.wait()
                    jobs.cancel_scope.cancel()  # they hold nothing worth finishing
                # Each actor ends once it has applied what is already in its inbox.
                for actor in self.actors:
                    actor.close()
        finally:
            with trio.CancelScope(shield=True):
                for db in self._databases:
                    await db.stop()
                if self._wal_sync is not None:
                    await trio.to_thread.run_sync(self._wal_sync.close)

    async def _admit_storage(self, storage: ReportsDurability) -> None:
        """Refuse to serve, before anything is written, on storage that cannot keep
        "durable before acknowledged", unless ``unsafe_durability`` (then one warning)."""
        self.durability = admit(await storage.durability(),
                                allow_unsafe=self.settings.unsafe_durability)

    async def _audit_ledger(self) -> None:
        """The start-up audit: a violation refuses to serve (naming the failing checks)
        unless ``allow_unbalanced``; either way /health and /metrics show it."""
        def check(conn: Connection) -> AuditReport:
            with transaction(conn):  # one consistent book (on PostgreSQL, one statement)
                return audit(conn)

        report = await self._setup.run(check)
        self.ledger_actor.turn.last_audit = report
        # A run of the ledger's audit job like the periodic ones: /health and /metrics
        # count it (it showed 0 runs until the first interval had passed).
        for job in self.ledger_actor.jobs:
            if job.name == "audit":
                job.record.succeeded(self.clock.now())
        if report.ok:
            return
        failing = "; ".join(f"{c.name} ({c.detail})" for c in report.checks if not c.ok)
        if not self.allow_unbalanced:
            raise LedgerUnbalanced(f"the ledger audit failed: {failing}; not serving "
                                   "(--allow-unbalanced serves anyway)")
        log.error("the ledger audit failed, serving anyway (--allow-unbalanced): %s", failing)

    @property
    def last_audit(self) -> AuditReport | None:
        """The ledger's last audit (at start-up, by the periodic job or on demand)."""
        return self.ledger_actor.turn.last_audit

    @property
    def durable(self) -> bool:
        """The storage keeps "durable before acknowledged" (False until start-up asked)."""
        return self.durability is not None and self.durability.durable

    @property
    def draining(self) -> bool:
        return self._draining

    def drain(self) -> None:
        """Parked long-polls answer with an empty list; new ones are refused."""
        self._draining = True
        for actor in self.actors:
            actor.drain()
        self.events.close()  # live event streams end; their clients come back later

    def close(self) -> None:
        """Stop the actors once they have applied what is already in their inboxes."""
        self._closed.set()


def new_system(db_path: Path, settings: Settings, *, clock: Clock | None = None,
               inline_storage: bool = False, allow_unbalanced: bool = False) -> System:
    """Build a system (nothing opened yet); must be called inside ``trio.run``."""
    return System(db_path, settings, clock or Clock(), inline_storage=inline_storage,
                  allow_unbalanced=allow_unbalanced)


@contextlib.asynccontextmanager
async def open_system(db_path: Path, settings: Settings, *, clock: Clock | None = None,
                      inline_storage: bool = False,
                      allow_unbalanced: bool = False) -> AsyncIterator[System]:
    """A running system for the body of the ``async with``; on exit the actors finish
    what their inboxes hold and everything is closed. A crashed actor cancels the
    body and its exception comes out of the ``async with``."""
    system = new_system(db_path, settings, clock=clock, inline_storage=inline_storage,
                        allow_unbalanced=allow_unbalanced)
    async with trio.open_nursery() as nursery:
        await nursery.start(system.run)
        try:
            yield system
        finally:
            system.close()


def _file_changed(path: Path) -> Callable[[], bool]:
    """Whether ``path`` changed since the last call (True the first time, and whenever
    it comes or goes): any commit by any process on SQLite writes its WAL file."""
    last: tuple[int, int, int] | bool | None = False

    def changed() -> bool:
        nonlocal last
        try:
            found = path.stat()
            now: tuple[int, int, int] | None = (found.st_ino, found.st_size,
                                                found.st_mtime_ns)
        except OSError:
            now = None
        moved, last = now != last, now
        return moved

    return changed
