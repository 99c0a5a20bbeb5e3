"""The workers' fenced calls on a task: start, renew, result.

A mixin of the task actor (:class:`leasegate.actors.tasks.TaskQueue`). Each
call must present the current lease (worker id and token); a repeat with the
same token and body after a lost reply returns the current state, and any
other mismatch is refused (6002) and logged with what the caller claimed.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Hashable
from typing import TYPE_CHECKING

from leasegate.actors.leases import check_site, new_work
from leasegate.actors.payloads import canonical_json, fingerprint
from leasegate.actors.task_messages import RenewTask, StartTask, TaskResult
from leasegate.actors.task_views import Renewed, Started, TaskView, task_view
from leasegate.clock import iso
from leasegate.errors import (
    LeasegateError,
    StateConflict,
    TaskLeaseInvalid,
    TaskNotFound,
)
from leasegate.logs import escape
from leasegate.storage import tasks_sql as sql

if TYPE_CHECKING:
    from leasegate.actors.billing import SettleNotices
    from leasegate.actors.history import JobHistory
    from leasegate.actors.task_messages import LeaseTasks
    from leasegate.settings import Settings

log = logging.getLogger("leasegate.tasks")


class FencedCalls:
    if TYPE_CHECKING:  # provided by TaskQueue and its Actor base
        settings: Settings
        settle: SettleNotices
        history: JobHistory

        def work_may_be_available(self, *topics: Hashable) -> None: ...
        def _current(self, conn: sqlite3.Connection, task_id: str) -> sqlite3.Row: ...
        def _seen(self, conn: sqlite3.Connection, worker_id: str, now: float,
                  lease: LeaseTasks | None = None) -> None: ...

    def _start(self, conn: sqlite3.Connection, m: StartTask, now: float) -> Started:
        row = self._existing(conn, m.task_id)
        check_site(row["site"], m.sites)
        started = row  # a retry after a lost response gets the current state
        if not (row["status"] == "running" and self._holds(row, m.worker_id, m.lease_token)):
            lease_expires_at = now + self.settings.task_lease_ttl
            now_running = sql.start(conn, m.task_id, m.worker_id, m.lease_token,
                                    lease_expires_at, now)
            if now_running is None:
                raise self._refuse("start", row, m.worker_id, m.lease_token)
            started = now_running
            log.info("task started: task_id=%s worker=%s attempt=%d",
                     escape(m.task_id), escape(m.worker_id), row["attempts"] + 1)
            self.history.record(conn, m.task_id, "started", job=started,
                                worker_id=m.worker_id, attempt=row["attempts"] + 1)
        self._seen(conn, m.worker_id, now)
        # The control flags too: a cancel may have come while the reply was lost,
        # and the worker should know before it touches the site.
        return Started(m.task_id, "running", started["lease_expires_at"],
                       bool(started["cancel_requested"]), bool(started["pause_requested"]))

    def _renew(self, conn: sqlite3.Connection, m: RenewTask, now: float) -> Renewed:
        row = self._existing(conn, m.task_id)
        check_site(row["site"], m.sites)
        progress = None if m.progress is None else canonical_json(m.progress)
        lease_expires_at = now + self.settings.task_lease_ttl
        if not sql.renew(conn, m.task_id, m.worker_id, m.lease_token, lease_expires_at,
                         progress, now):
            raise self._refuse("renew", row, m.worker_id, m.lease_token)
        self._seen(conn, m.worker_id, now)
        if progress is not None and progress != row["progress"]:  # not every renewal
            self.history.record(conn, m.task_id, "renewed", progress=m.progress)
        row = self._current(conn, m.task_id)
        return Renewed(lease_expires_at, bool(row["cancel_requested"]),
                       bool(row["pause_requested"]))

    def _result(self, conn: sqlite3.Connection, m: TaskResult, now: float) -> TaskView:
        row = self._existing(conn, m.task_id)
        check_site(row["site"], m.sites)
        if m.outcome == "paused" and row["batch_total"] is None:
            raise StateConflict(f"task {m.task_id} is not a batch task (no batch_total): "
                                "outcome paused is only for batch tasks")
        result = None if m.result is None else canonical_json(m.result)  # once each
        progress = None if m.progress is None else canonical_json(m.progress)
        digest = fingerprint(m.outcome, result, m.error_code, m.error_message, m.cost, progress)
        ours = self._holds(row, m.worker_id, m.lease_token)
        status = row["status"]
        if status in sql.TERMINAL or status == "paused":
            if ours and row["outcome_digest"] == digest:
                self._seen(conn, m.worker_id, now)
                return task_view(row)  # a retry of the accepted result
            raise self._refuse("result", row, m.worker_id, m.lease_token,
                               f"the task is already {status}; no further result is accepted")
        if not ours or status not in ("running", "stale"):
            raise self._refuse("result", row, m.worker_id, m.lease_token)
        # A stale task takes its last lease's report, a pause too: the worker stopped
        # cleanly at that checkpoint and knows better than an operator's guess.
        late = status == "stale"
        code, message = m.error_code, m.error_message
        if m.outcome == "succeeded":
            result = result if result is not None else canonical_json({})
            code, message = None, None
        elif m.outcome == "failed":
            message = message or "the worker gave no reason"
            log.warning("task failed: task_id=%s kind=%s code=%s message=%s",
                        escape(m.task_id), escape(row["kind"]), code, escape(message))
        # A batch task paused at a checkpoint while its client asked to cancel: canceled.
        to = "canceled" if m.outcome == "paused" and row["cancel_requested"] else m.outcome
        done = sql.finish(conn, m.task_id, status, m.lease_token, to, now, result=result,
                          error_code=code, error_message=message, cost=m.cost,
                          progress=progress, digest=digest, late=late)
        if done is None:
            raise self._refuse("result", row, m.worker_id, m.lease_token)
        if late:
            log.warning("late result accepted for stale task: task_id=%s worker=%s outcome=%s "
                        "stale_reason=%s", escape(m.task_id), escape(m.worker_id), m.outcome,
                        escape(row["stale_reason"]))
        self.history.record(conn, m.task_id, "result", job=done, outcome=m.outcome,
                            late=late, worker_id=m.worker_id, cost=m.cost)
        self._seen(conn, m.worker_id, now)
        self.work_may_be_available(*new_work(row["site"]))  # lane free
        self.settle.ended(done, sql.TERMINAL)
        return task_view(done)

    def _existing(self, conn: sqlite3.Connection, task_id: str) -> sqlite3.Row:
        row = sql.get(conn, task_id)
        if row is None:
            raise TaskNotFound(f"no task {task_id}")
        return row

    @staticmethod
    def _holds(row: sqlite3.Row, worker_id: str, token: str) -> bool:
        return bool(row["lease_owner"] == worker_id and row["lease_token"] == token)

    def _refuse(self, call: str, row: sqlite3.Row, worker_id: str, token: str,
                reason: str | None = None) -> LeasegateError:
        """A fenced call that does not hold the task's current lease: 6002, logged."""
        status = row["status"]
        if reason is None:
            if status == "queued":
                reason = "the task is queued again: its claim expired or was given back"
            elif row["lease_token"] != token:
                reason = (f"the task is {status} under another lease" if row["lease_token"]
                          else f"the task is {status} and holds no lease")
            elif row["lease_owner"] != worker_id:
                reason = "the lease belongs to another worker"
            elif status == "leased" and call != "start":
                reason = "the task was never started (start it first)"
            elif status == "leased":
                reason = f"the claim window ended at {iso(row['claim_expires_at'])}"
            elif status == "running":
                reason = f"the lease expired at {iso(row['lease_expires_at'])}"
            else:
                reason = f"the task is {status}"
        log.warning("task %s refused: worker=%s task_id=%s status=%s reason=%s",
                    call, escape(worker_id), escape(row["task_id"]), status, escape(reason))
        return TaskLeaseInvalid(f"{call} of task {row['task_id']} refused: {reason}")
