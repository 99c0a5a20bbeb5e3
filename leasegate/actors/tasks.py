"""The task actor: irreversible writes, delivered at most once, one in flight per lane.

A lease is only a *claim*: the worker must ``start`` within
``task_claim_window`` before it touches the site; an unstarted claim returns
to ``queued`` silently (nothing can have happened, no attempt is burned).
Once started, the task runs under a lease renewed every ``task_lease_ttl``;
a lease that lapses, or a run longer than ``task_hard_timeout``, makes the
task ``stale``: never retried automatically, it blocks its lane (site +
account) until an operator reclaims it or the last lease reports late.

Every transition is a conditional UPDATE (status and lease token), and the
database itself refuses a second task in flight on a lane (a partial unique
index). Lease, start, renew and result are the workers' heartbeat.

Deadlines are timers: the actor wakes exactly at the next claim expiry, lease
expiry, hard timeout, TTL or ``not_before``.

Finished tasks are purged after ``task_retention``; each leaves a tombstone
(tenant, id, fingerprint, final status) for ``id_tombstone_retention``, so an
upstream resubmitting the id days later gets a replay or 6004, never the
order placed again.

The handlers are split by who calls them: the workers' fenced calls in
``task_fencing``, clients' and operators' control in ``task_control``,
what devices' presence does to their tasks in ``task_devices``, artifacts in
``task_artifacts``, worker presence and health in ``task_presence``; submit,
read, lease and the clock's transitions here.
"""

from __future__ import annotations

import logging
import math
import sqlite3

from leasegate.actors import task_artifacts, task_presence
from leasegate.actors.batches import EachItem
from leasegate.actors.billing import SettleNotices
from leasegate.actors.event_hub import EventHub
from leasegate.actors.history import GetHistory, JobHistory, RecordSettled
from leasegate.actors.jobs import JobRecord
from leasegate.actors.leases import (
    DryFilters,
    job_wait,
    lease_wait,
    new_lease_token,
    new_work,
)
from leasegate.actors.mailbox import Ask, Mailbox, Tell
from leasegate.actors.pages import Paged
from leasegate.actors.parking import Wait
from leasegate.actors.payloads import canonical_json, fingerprint
from leasegate.actors.runtime import PARK, Actor
from leasegate.actors.submissions import submit_once
from leasegate.actors.task_control import TaskControl
from leasegate.actors.task_devices import DeviceTasks
from leasegate.actors.task_fencing import FencedCalls
from leasegate.actors.task_messages import (
    SETTLED,
    ApplyDeviceAction,
    CheckTaskHealth,
    ControlTask,
    CountTasks,
    ExistingTasks,
    FindArtifact,
    GetTask,
    LeaseTasks,
    ListArtifacts,
    ListSites,
    ListTasks,
    ListWorkers,
    ReclaimTask,
    RecordArtifact,
    ReleaseTaskLeases,
    RenewTask,
    StartTask,
    StartTasks,
    SubmitTask,
    SubmitTasks,
    TaskResult,
    TaskResults,
    release_message,
)
from leasegate.actors.task_views import (
    TaskLease,
    TaskSubmitted,
    TaskView,
    task_lease,
    task_view,
)
from leasegate.clock import Clock, iso
from leasegate.errors import (
    InvalidRequest,
    TaskNotFound,
    Unavailable,
)
from leasegate.logs import escape
from leasegate.settings import Settings
from leasegate.storage import presence_sql
from leasegate.storage import tasks_sql as sql
from leasegate.storage.artifacts import ArtifactStore
from leasegate.storage.connection import Database
from leasegate.storage.pages import page_rows

log = logging.getLogger("leasegate.tasks")

PURGE_BATCH = 2000  # rows a purge run deletes; a full batch runs again a second later

# ---- the actor ------------------------------------------------------------------

class TaskQueue(Actor, TaskControl, FencedCalls, DeviceTasks, EachItem):
    name = "tasks"

    def __init__(self, db: Database, clock: Clock, settings: Settings,
                 artifacts: ArtifactStore | None = None, *,
                 ledger: Mailbox | None = None, events: EventHub | None = None) -> None:
        super().__init__(db, clock, error_log_window=settings.error_log_window)
        self.settings = settings
        self.history = JobHistory(self, "task", events)  # one record() per transition
        # A task with max_cost that ends is settled by the ledger after the commit.
        self.settle = SettleNotices(self, "task", ledger)
        self._dry = DryFilters()
        self._seen_in_turn: tuple[int, set[str]] = (-1, set())
        self.artifacts = artifacts
        # How far passed not_before times have already woken the parked leases.
        self._not_before_seen = -math.inf
        self.add_job("purge_tasks", settings.housekeeping_interval, self._purge)
        # The exact timer of on_wakeup (claims, leases, hard timeouts, task_ttl): runs
        # when the data says, so it is listed with the on-demand jobs (never overdue).
        self.deadline_timer = JobRecord("deadlines", owner=self.name, every=math.inf)

    def handle(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        now = self.now  # the turn's instant (trio's clock is not readable on the DB thread)
        match message:
            case SubmitTask():
                return self._submit(conn, message, now)
            case SubmitTasks():
                return self.each(conn, message.items, lambda c, m: self._submit(c, m, now))
            case GetTask():
                row = self._visible(conn, message.task_id, message.tenant)
                if message.wait and row["status"] not in SETTLED:
                    return PARK
                return task_view(row)
            case ListTasks():
                return self._list(conn, message)
            case ControlTask():
                return self._control(conn, message, now)
            case ApplyDeviceAction():
                return self._device_action(conn, message, now)
            case LeaseTasks():
                if self.draining:
                    raise Unavailable("the gateway is shutting down")
                task_presence.admit(conn, message, now, self.settings)
                self._seen(conn, message.worker_id, now, message)
                leases = self._lease(conn, message, now)
                if not leases and message.wait:
                    return PARK
                return leases
            case StartTask():
                return self._start(conn, message, now)
            case StartTasks():
                return self.each(conn, message.items, lambda c, m: self._start(c, m, now))
            case RenewTask():
                return self._renew(conn, message, now)
            case TaskResult():
                return self._result(conn, message, now)
            case TaskResults():
                return self.each(conn, message.items, lambda c, m: self._result(c, m, now))
            case ReclaimTask():
                return self._reclaim(conn, message, now)
            case ReleaseTaskLeases():
                for task_id, token in message.leases:
                    self._release(conn, task_id, token, now)
                return None
            case ListWorkers():
                return task_presence.workers_page(conn, message.page, now,
                                                  self.settings.worker_offline_after)
            case RecordArtifact():
                stored, replaced = task_artifacts.record(conn, message, now, self.artifacts,
                                                         self.settings)
                store = self.artifacts
                if replaced is not None and store is not None:
                    m = message
                    self.after_commit(lambda: store.discard_file_later(m.task_id, m.name, replaced))
                return stored
            case ListArtifacts():
                return task_artifacts.listing(conn, message)
            case FindArtifact():
                return task_artifacts.find(conn, message)
            case CountTasks():
                return sql.count_unfinished(conn)
            case ExistingTasks():
                return frozenset(sql.existing(conn, list(message.task_ids)))
            case CheckTaskHealth():
                return task_presence.health(conn, now, self.settings.worker_offline_after,
                                            message.top)
            case ListSites():
                return task_presence.sites_page(conn, message, now,
                                                self.settings.worker_offline_after)
            case GetHistory() | RecordSettled():
                return self.history.handle(conn, message, self._visible)
        raise InvalidRequest(f"tasks: not a task message: {type(message).__name__}")

    # ---- submit / read ----

    def _submit(self, conn: sqlite3.Connection, m: SubmitTask, now: float) -> TaskSubmitted:
        params = canonical_json(m.params)  # once: the fingerprint takes the text
        digest = fingerprint(m.tenant, m.site, m.account, m.kind, params, m.priority,
                             m.not_before, m.device_id, m.batch_total, m.max_cost)
        task_id, replayed = submit_once(
            m.task_id, "t", digest, "task",
            lambda i: sql.insert(
                conn, task_id=i, tenant=m.tenant, site=m.site, account=m.account, kind=m.kind,
                params=params, priority=m.priority, not_before=m.not_before,
                device_id=m.device_id, batch_total=m.batch_total, max_cost=m.max_cost,
                fingerprint=digest, status="queued", created_at=now, updated_at=now,
                expires_at=self._ttl_deadline(m.not_before, now)),
            lambda i: sql.get_or_tombstone(conn, i))
        if replayed is not None:
            return TaskSubmitted(task_id, replayed, created=False)
        self.history.record(conn, task_id, "submitted", job={
            "tenant": m.tenant, "site": m.site, "device_id": m.device_id, "status": "queued",
            "kind": m.kind})
        if m.not_before is None or m.not_before <= now:
            self.work_may_be_available(*new_work(m.site))
        return TaskSubmitted(task_id, "queued", created=True)

    def _ttl_deadline(self, not_before: float | None, now: float) -> float:
        """``task_ttl`` counts from now, or from ``not_before`` if that is later."""
        start = now if not_before is None else max(now, not_before)
        return start + self.settings.task_ttl

    def _visible(self, conn: sqlite3.Connection, task_id: str, tenant: str | None) -> sqlite3.Row:
        row = sql.get(conn, task_id)
        if row is None or (tenant is not None and row["tenant"] != tenant):
            raise TaskNotFound(f"no task {task_id}")
        return row

    def _current(self, conn: sqlite3.Connection, task_id: str) -> sqlite3.Row:
        row = sql.get(conn, task_id)
        assert row is not None, task_id
        return row

    def _list(self, conn: sqlite3.Connection, m: ListTasks) -> Paged[TaskView]:
        total, rows = page_rows(conn, "tasks", {"tenant": m.tenant, "status": m.status,
                                                 "site": m.site, "account": m.account,
                                                 "kind": m.kind}, m.page.limit, m.page.offset)
        return Paged(tuple(task_view(r) for r in rows), total, m.page.limit, m.page.offset)

    # ---- lease ----

    def _lease(self, conn: sqlite3.Connection, m: LeaseTasks, now: float) -> tuple[TaskLease, ...]:
        sites = list(m.sites) if m.sites is not None else None
        if m.request_id is not None:
            # A retry after a lost response: the same claims, the same tokens (never
            # beyond this call's sites and max, whoever else used the same ids).
            replay = sql.leased_by_request(conn, m.worker_id, m.request_id, sites, m.max)
            if replay:
                return tuple(task_lease(row) for row in replay)
        claim_expires_at = now + self.settings.task_claim_window
        leases = []
        for row in sql.next_queued(conn, sites, now, m.max):
            token = new_lease_token()
            leased = sql.take_lease(conn, row["task_id"], m.worker_id, token, m.request_id,
                                    claim_expires_at, now)
            if leased is not None:
                # waited: from submit (or not_before) to this lease, the dispatch latency
                self.history.record(conn, row["task_id"], "leased", job=leased,
                                    worker_id=m.worker_id,
                                    attempt=leased["attempts"] + 1, waited=round(
                                        now - max(leased["created_at"],
                                                  leased["not_before"] or 0.0), 3))
                leases.append(task_lease(leased))
        return tuple(leases)

    def parked_on(self, message: Ask[object] | Tell) -> Wait | None:
        if isinstance(message, LeaseTasks):
            return lease_wait(message.sites)
        if isinstance(message, GetTask):
            return job_wait(message.task_id)
        return None

    def serve_parked(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object | None:
        if isinstance(message, GetTask):
            row = sql.get(conn, message.task_id)
            if row is None:  # purged while waiting
                return None
            return task_view(row) if row["status"] in SETTLED else None
        if isinstance(message, LeaseTasks):
            if self._dry.known(self.turn, message.sites):
                return None
            now = self.now
            leases = self._lease(conn, message, now)
            if leases:
                self._seen(conn, message.worker_id, now, message)
            else:
                self._dry.add(self.turn, message.sites)
            return leases or None
        return None

    def drained_reply(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        if isinstance(message, GetTask):  # the task as it is now
            return task_view(self._visible(conn, message.task_id, message.tenant))
        return ()  # a lease call: nothing

    def undelivered(self, message: Ask[object] | Tell, reply: object) -> Tell | None:
        if isinstance(message, LeaseTasks) and isinstance(reply, tuple):
            return release_message(reply)
        return None

    def _release(self, conn: sqlite3.Connection, task_id: str, token: str, now: float) -> None:
        """A claim nobody received: back to the queue, burning nothing."""
        row = sql.get(conn, task_id)
        if row is None or row["status"] != "leased" or row["lease_token"] != token:
            return
        if sql.back_to_queue(conn, task_id, "leased", token, self._requeue_status(row), now):
            log.info("task lease released (never received): task_id=%s worker=%s",
                     escape(task_id), escape(row["lease_owner"]))
            self.history.record(conn, task_id, "released", worker_id=row["lease_owner"])
            self.work_may_be_available(*new_work(row["site"]))

    @staticmethod
    def _requeue_status(row: sqlite3.Row) -> str:
        """Where an unstarted task goes back to: a pending pause request is honoured."""
        if row["pause_requested"] and row["batch_total"] is not None:
            return "paused"
        return "queued"

    # ---- workers and health ----

    def _seen(self, conn: sqlite3.Connection, worker_id: str, now: float,
              lease: LeaseTasks | None = None) -> None:
        if lease is None:
            # Once a turn per worker: a batch of 100 starts or results is one sighting.
            # (Presence is a hint: should the item that wrote it be rolled back, the
            # worker's next call writes it.)
            turn, seen = self._seen_in_turn
            if turn != self.turn:
                seen = set()
                self._seen_in_turn = (self.turn, seen)
            if worker_id in seen:
                return
            seen.add(worker_id)
            presence_sql.seen(conn, worker_id, now)
        else:
            sites = None if lease.sites is None else canonical_json(list(lease.sites))
            presence_sql.seen(conn, worker_id, now, sites=sites, update_sites=True,
                              key_id=lease.key_id)

    # ---- deadlines and periodic jobs ----

    def next_wakeup(self, conn: sqlite3.Connection) -> float | None:
        # A not_before at or before this turn's instant has been handled (no spinning).
        return sql.next_deadline(conn, self.settings.task_hard_timeout, self.now)

    def on_wakeup(self, conn: sqlite3.Connection, now: float) -> None:
        for row in sql.lapsed_claims(conn, now):
            # Never started, so provably never executed: back to the queue, silently.
            to = self._requeue_status(row)
            if sql.back_to_queue(conn, row["task_id"], "leased", row["lease_token"], to, now):
                log.info("task claim expired unstarted, back to %s: task_id=%s worker=%s",
                         to, escape(row["task_id"]), escape(row["lease_owner"]))
                self.history.record(conn, row["task_id"], "claim_lapsed",
                                    worker_id=row["lease_owner"])
                self.work_may_be_available(*new_work(row["site"]))
        hard_timeout = self.settings.task_hard_timeout
        for row in sql.past_hard_timeout(conn, now, hard_timeout):
            self._make_stale(conn, row, now, (
                f"hard_timeout: running since {iso(row['started_at'])} under worker "
                f"{row['lease_owner']}, longer than task_hard_timeout ({hard_timeout:g} s)"))
        for row in sql.lapsed_leases(conn, now):
            self._make_stale(conn, row, now, (
                f"lease_expired: worker {row['lease_owner']} stopped renewing at "
                f"{iso(row['renewed_at'])}"))
        for row in sql.expire_past_ttl(conn, now, self.settings.task_ttl):
            log.warning("task expired unstarted: task_id=%s kind=%s site=%s account=%s",
                        escape(row["task_id"]), escape(row["kind"]), escape(row["site"]),
                        escape(row["account"]))
            self.history.record(conn, row["task_id"], "expired")
            self.settle.ended(sql.get(conn, row["task_id"]), sql.TERMINAL)
        if sql.not_before_passed(conn, self._not_before_seen, now):
            self.work_may_be_available()  # a parked lease may take it now
        self.after_commit(lambda: self._passed_not_before(now))
        self.after_commit(lambda: self.deadline_timer.succeeded(now))

    def _passed_not_before(self, now: float) -> None:
        self._not_before_seen = max(self._not_before_seen, now)

    def _make_stale(self, conn: sqlite3.Connection, row: sqlite3.Row, now: float,
                    reason: str) -> None:
        # Never retried automatically: the write may have happened. The lane stays blocked.
        if sql.make_stale(conn, row["task_id"], row["lease_token"], reason, now):
            log.warning("task stale, lane %s/%s blocked until reclaimed: task_id=%s reason=%s",
                        escape(row["site"]), escape(row["account"]), escape(row["task_id"]),
                        escape(reason))
            self.history.record(conn, row["task_id"], "stale", reason=reason)

    def _purge(self, conn: sqlite3.Connection, now: float) -> bool:
        """Delete finished tasks past retention (each leaves a tombstone that keeps
        its id taken) and tombstones past theirs, a batch at a time; True if more remain."""
        cutoff = now - self.settings.task_retention
        purged = sql.purge_completed_before(conn, cutoff, now, PURGE_BATCH)
        forgotten_ids = sql.purge_tombstones_before(
            conn, now - self.settings.id_tombstone_retention, PURGE_BATCH)
        more = PURGE_BATCH in (len(purged), forgotten_ids)
        if forgotten_ids:
            log.info("forgot %d task id tombstones past id_tombstone_retention", forgotten_ids)
        if purged:
            log.info("purged %d finished tasks past retention", len(purged))
            store = self.artifacts
            if store is not None:
                # Files go after the commit, off this path: deleting a big
                # directory here once stalled the whole queue.
                self.after_commit(lambda: store.discard_later(purged))
        forgotten = presence_sql.purge_workers_before(conn, cutoff)
        if forgotten:
            log.info("forgot %d workers not seen within task_retention", forgotten)
        return more

