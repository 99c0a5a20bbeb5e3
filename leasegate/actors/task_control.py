"""What clients and operators do to a task: cancel, pause, resume, reclaim.

A mixin of the task actor (:class:`leasegate.actors.tasks.TaskQueue`), kept
apart because these transitions are decided by people, not by the workers'
fenced calls or the clock; each is a conditional update, and a change that
raced another is 6003.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Hashable
from typing import TYPE_CHECKING

from leasegate.actors.leases import new_work
from leasegate.actors.payloads import canonical_json
from leasegate.actors.task_messages import ControlAction, ControlTask, ReclaimTask
from leasegate.actors.task_views import TaskView, task_view
from leasegate.errors import InvalidRequest, StateConflict
from leasegate.logs import escape
from leasegate.storage import tasks_sql as sql

if TYPE_CHECKING:
    from leasegate.actors.billing import SettleNotices
    from leasegate.actors.history import JobHistory

log = logging.getLogger("leasegate.tasks")


class TaskControl:
    if TYPE_CHECKING:  # provided by TaskQueue and its Actor base
        settle: SettleNotices
        history: JobHistory

        def work_may_be_available(self, *topics: Hashable) -> None: ...
        def _visible(self, conn: sqlite3.Connection, task_id: str,
                     tenant: str | None) -> sqlite3.Row: ...
        def _current(self, conn: sqlite3.Connection, task_id: str) -> sqlite3.Row: ...
        def _existing(self, conn: sqlite3.Connection, task_id: str) -> sqlite3.Row: ...
        def _ttl_deadline(self, not_before: float | None, now: float) -> float: ...
        @staticmethod
        def _requeue_status(row: sqlite3.Row) -> str: ...

    def _control(self, conn: sqlite3.Connection, m: ControlTask, now: float) -> TaskView:
        """Cancel, pause or resume; a change that raced another is 6003."""
        row = self._visible(conn, m.task_id, m.tenant)
        if m.action != "cancel" and row["batch_total"] is None:
            raise StateConflict(f"task {m.task_id} is not a batch task (no batch_total): "
                                "only batch tasks pause and resume")
        changed = self._apply_control(conn, m.action, row, now)
        if changed is None:
            raise StateConflict(f"task {m.task_id} changed concurrently; try again")
        return task_view(changed)

    def _apply_control(self, conn: sqlite3.Connection, action: ControlAction, row: sqlite3.Row,
                       now: float, *, by: str | None = None) -> sqlite3.Row | None:
        """One cancel, pause or resume, by a client, an operator or a device: the task
        as it is now, or None when it had changed meanwhile. Written to its history,
        its waiting readers woken, its hold settled when it ended."""
        act = {"cancel": self._cancel, "pause": self._pause, "resume": self._resume}[action]
        if not act(conn, row, now):
            return None
        changed = self._current(conn, row["task_id"])
        self.history.controlled(conn, action, row, changed, by=by)
        self.settle.ended(changed, sql.TERMINAL)  # a cancel of an unstarted task
        return changed

    def _cancel(self, conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> bool:
        task_id, status, token = row["task_id"], row["status"], row["lease_token"]
        if status in ("queued", "paused"):
            return sql.cancel_unleased(conn, task_id, status, token, now)
        if status == "leased":
            # Never started: nothing happened yet; a later start with this token is 6002.
            self.work_may_be_available(*new_work(row["site"]))  # the lane is free
            log.info("task canceled while leased, claim withdrawn: task_id=%s worker=%s",
                     escape(task_id), escape(row["lease_owner"]))
            return sql.back_to_queue(conn, task_id, "leased", token, "canceled", now)
        if status == "running":
            return sql.set_flag(conn, task_id, "cancel_requested", True, "running", token, now)
        hint = " (an operator resolves a stale task by reclaim)" if status == "stale" else ""
        raise StateConflict(f"task {task_id} is {status} and cannot be canceled{hint}")

    def _pause(self, conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> bool:
        task_id, status, token = row["task_id"], row["status"], row["lease_token"]
        if status == "queued":
            return sql.pause_queued(conn, task_id, token, now)
        if status in ("leased", "running"):
            return sql.set_flag(conn, task_id, "pause_requested", True, status, token, now)
        if status == "paused":  # pausing a paused task changes nothing
            return True
        raise StateConflict(f"task {task_id} is {status} and cannot be paused")

    def _resume(self, conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> bool:
        task_id, status, token = row["task_id"], row["status"], row["lease_token"]
        if status == "paused":
            self.work_may_be_available(*new_work(row["site"]))
            return sql.resume(conn, task_id, token, self._ttl_deadline(row["not_before"], now),
                              now)
        if status in ("leased", "running"):
            if not row["pause_requested"]:
                return True
            return sql.set_flag(conn, task_id, "pause_requested", False, status, token, now)
        if status == "queued":  # resuming a queued task changes nothing
            return True
        raise StateConflict(f"task {task_id} is {status} and cannot be resumed")

    def _reclaim(self, conn: sqlite3.Connection, m: ReclaimTask, now: float) -> TaskView:
        row = self._existing(conn, m.task_id)
        if row["status"] != "stale":
            raise StateConflict(f"task {m.task_id} is {row['status']}; only a stale task "
                                "can be reclaimed")
        if m.action == "requeue" and (m.result is not None or m.cost is not None):
            raise InvalidRequest("result and cost go with reclaim succeeded or failed, "
                                 "not requeue")
        result, error_message, expires_at = None, None, None
        if m.action == "requeue":
            # A cancel asked for while it ran is honoured now that nothing runs.
            status = "canceled" if row["cancel_requested"] else self._requeue_status(row)
            expires_at = self._ttl_deadline(row["not_before"], now)
        elif m.action == "succeeded":
            status = "succeeded"
            result = canonical_json(m.result if m.result is not None else {})
        else:
            status = "failed"
            result = None if m.result is None else canonical_json(m.result)
            error_message = f"reclaimed as failed by {m.by}: {m.reason}"
        if not sql.reclaim(conn, m.task_id, row["lease_token"], status, action=m.action,
                           reason=m.reason, by=m.by, now=now, result=result,
                           error_message=error_message, cost=m.cost, expires_at=expires_at):
            raise StateConflict(f"task {m.task_id} changed concurrently; try again")
        log.warning("task reclaimed: task_id=%s action=%s status=%s by=%s reason=%s "
                    "stale_reason=%s", escape(m.task_id), m.action, status, escape(m.by),
                    escape(m.reason), escape(row["stale_reason"]))
        self.history.record(conn, m.task_id, "reclaimed", action=m.action, reason=m.reason,
                            by=m.by)
        self.work_may_be_available(*new_work(row["site"]))  # the lane is free
        resolved = self._current(conn, m.task_id)
        self.settle.ended(resolved, sql.TERMINAL)  # a stale task's hold is resolved now
        return task_view(resolved)
