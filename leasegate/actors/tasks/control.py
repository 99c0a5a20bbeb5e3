"""What clients and operators do to a task, each message followed by its handler:
cancel, pause, resume, reclaim.

Kept apart because these transitions are decided by people, not by the workers'
fenced calls or the clock; each is a conditional update, and a change that
raced another is 6003. A device's presence takes the same transitions
(``device_actions.py``), so the rules stay one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import (
    MAX_AMOUNT,
    MAX_TEXT,
    check_choice,
    check_id,
    check_int,
    check_json,
    check_number,
    check_text,
)
from leasegate.actors.payloads import canonical_json
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.retry import MAX_REDRIVE
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.turn import TASKS, TaskTurn, requeue_status
from leasegate.actors.tasks.views import TaskView, task_view
from leasegate.actors.views import JSONValue
from leasegate.errors import InvalidRequest, StateConflict
from leasegate.logs import escape
from leasegate.storage import operator_sql
from leasegate.storage import tasks_sql as sql
from leasegate.storage.engine import Row

log = logging.getLogger("leasegate.tasks")

ControlAction = Literal["cancel", "pause", "resume"]
ReclaimAction = Literal["requeue", "succeeded", "failed"]


@dataclass(frozen=True)
class ControlTask(Ask[Tasks, TaskView]):
    """A client's (or an admin's) cancel, pause or resume of one task; an operator's
    says who (``by``: the key) and may say why (recorded in its history)."""

    task_id: str
    action: ControlAction
    tenant: str | None = None
    by: str | None = None
    reason: str | None = None

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_choice("action", self.action, ControlAction)
        check_id("tenant", self.tenant, optional=True)
        check_text("by", self.by, optional=True, most=MAX_TEXT, empty=False)
        check_text("reason", self.reason, optional=True, most=500, empty=False)


@TASKS.on(ControlTask)
def control(turn: TaskTurn, m: ControlTask) -> TaskView:
    """Cancel, pause or resume; a change that raced another is 6003."""
    row = turn.visible(m.task_id, m.tenant)
    if m.action != "cancel" and row["batch_total"] is None:
        raise StateConflict(f"task {m.task_id} is not a batch task (no batch_total): "
                            "only batch tasks pause and resume")
    changed = apply_control(turn, m.action, row, by=m.by, reason=m.reason)
    if changed is None:
        raise StateConflict(f"task {m.task_id} changed concurrently; try again")
    return task_view(changed)


def apply_control(turn: TaskTurn, action: ControlAction, row: Row, *,
                  by: str | None = None, reason: str | None = None) -> Row | None:
    """One cancel, pause or resume, by a client, an operator or a device: the task
    as it is now, or None when it had changed meanwhile. Written to its history,
    its waiting readers woken, its hold settled when it ended."""
    act = {"cancel": _cancel, "pause": _pause, "resume": _resume}[action]
    if not act(turn, row):
        return None
    changed = turn.current(row["task_id"])
    turn.history.controlled(action, row, changed, by=by, reason=reason)
    turn.settle.ended(changed)  # a cancel of an unstarted task
    return changed


def _cancel(turn: TaskTurn, row: Row) -> bool:
    conn, now = turn.conn, turn.now
    task_id, status, token = row["task_id"], row["status"], row["lease_token"]
    if status in ("queued", "paused"):
        return sql.cancel_unleased(conn, task_id, status, token, now)
    if status == "leased":
        # Never started: nothing happened yet; a later start with this token is 6002.
        turn.work_may_be_available(*new_work(row["site"]))  # the lane is free
        log.info("task canceled while leased, claim withdrawn: task_id=%s worker=%s",
                 escape(task_id), escape(row["lease_owner"]))
        return sql.back_to_queue(conn, task_id, "leased", token, "canceled", now)
    if status == "running":
        return sql.set_flag(conn, task_id, "cancel_requested", True, "running", token, now)
    hint = " (an operator resolves a stale task by reclaim)" if status == "stale" else ""
    raise StateConflict(f"task {task_id} is {status} and cannot be canceled{hint}")


def _pause(turn: TaskTurn, row: Row) -> bool:
    conn, now = turn.conn, turn.now
    task_id, status, token = row["task_id"], row["status"], row["lease_token"]
    if status == "queued":
        return sql.pause_queued(conn, task_id, token, now)
    if status in ("leased", "running"):
        return sql.set_flag(conn, task_id, "pause_requested", True, status, token, now)
    if status == "paused":  # pausing a paused task changes nothing
        return True
    raise StateConflict(f"task {task_id} is {status} and cannot be paused")


def _resume(turn: TaskTurn, row: Row) -> bool:
    conn, now = turn.conn, turn.now
    task_id, status, token = row["task_id"], row["status"], row["lease_token"]
    if status == "paused":
        turn.work_may_be_available(*new_work(row["site"]))
        return sql.resume(conn, task_id, token, turn.ttl_deadline(row["not_before"]), now)
    if status in ("leased", "running"):
        if not row["pause_requested"]:
            return True
        return sql.set_flag(conn, task_id, "pause_requested", False, status, token, now)
    if status == "queued":  # resuming a queued task changes nothing
        return True
    raise StateConflict(f"task {task_id} is {status} and cannot be resumed")


@dataclass(frozen=True)
class ReclaimTask(Ask[Tasks, TaskView]):
    task_id: str
    action: ReclaimAction
    reason: str
    by: str  # the key (or operator) that did it
    result: JSONValue = None
    cost: int | None = None

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_choice("action", self.action, ReclaimAction)
        check_text("reason", self.reason, most=MAX_TEXT, empty=False)
        check_text("by", self.by, most=MAX_TEXT, empty=False)
        check_json("result", self.result)
        check_int("cost", self.cost, 0, MAX_AMOUNT, optional=True)


@TASKS.on(ReclaimTask)
def reclaim(turn: TaskTurn, m: ReclaimTask) -> TaskView:
    """An operator resolves a stale task: requeue it, or record how it ended."""
    row = turn.visible(m.task_id, None)
    if row["status"] != "stale":
        raise StateConflict(f"task {m.task_id} is {row['status']}; only a stale task "
                            "can be reclaimed")
    if m.action == "requeue" and (m.result is not None or m.cost is not None):
        raise InvalidRequest("result and cost go with reclaim succeeded or failed, "
                             "not requeue")
    result, error_message, expires_at = None, None, None
    if m.action == "requeue":
        # A cancel asked for while it ran is honoured now that nothing runs.
        status = "canceled" if row["cancel_requested"] else requeue_status(row)
        expires_at = turn.ttl_deadline(row["not_before"])
    elif m.action == "succeeded":
        status = "succeeded"
        result = canonical_json(m.result if m.result is not None else {})
    else:
        status = "failed"
        result = None if m.result is None else canonical_json(m.result)
        error_message = f"reclaimed as failed by {m.by}: {m.reason}"
    if not sql.reclaim(turn.conn, m.task_id, row["lease_token"], status, action=m.action,
                       reason=m.reason, by=m.by, now=turn.now, result=result,
                       error_message=error_message, cost=m.cost, expires_at=expires_at):
        raise StateConflict(f"task {m.task_id} changed concurrently; try again")
    log.warning("task reclaimed: task_id=%s action=%s status=%s by=%s reason=%s "
                "stale_reason=%s", escape(m.task_id), m.action, status, escape(m.by),
                escape(m.reason), escape(row["stale_reason"]))
    turn.history.record(m.task_id, "reclaimed", action=m.action, reason=m.reason, by=m.by)
    turn.work_may_be_available(*new_work(row["site"]))  # the lane is free
    resolved = turn.current(m.task_id)
    turn.settle.ended(resolved)  # a stale task's hold is resolved now
    return task_view(resolved)


@dataclass(frozen=True)
class ReclaimTasks(Batch[Tasks, ReclaimTask, TaskView]):
    """A bulk reclaim's (up to 100 a message), each on its own: a task that is no
    longer stale is that item's 409, not the others'."""

    item = ReclaimTask


TASKS.each(ReclaimTasks, reclaim)


@dataclass(frozen=True)
class StaleTasks:
    """What a bulk reclaim's filters match: how many, and the ids of the first ``limit``
    to have gone stale."""

    matched: int
    task_ids: tuple[str, ...]


@dataclass(frozen=True)
class StaleReclaimed:
    """A bulk reclaim's answer: the stale tasks matched, and those it resolved."""

    matched: int
    reclaimed: int


@dataclass(frozen=True)
class FindStaleTasks(Ask[Tasks, StaleTasks]):
    """The stale tasks of ``site`` and ``account`` (None: any) that went stale at or
    after ``since`` and before ``until`` (wall seconds; None: any), the first ``most``
    to have gone stale (a bulk reclaim's ``limit``)."""

    site: str | None = None
    account: str | None = None
    since: float | None = None
    until: float | None = None
    most: int = 1000

    def check(self) -> None:
        check_id("site", self.site, optional=True)
        check_id("account", self.account, optional=True)
        for name in ("since", "until"):
            check_number(name, getattr(self, name), 0, 1e12, optional=True)
        check_int("limit", self.most, 1, MAX_REDRIVE)


@TASKS.on(FindStaleTasks)
def find_stale(turn: TaskTurn, m: FindStaleTasks) -> StaleTasks:
    matched, ids = operator_sql.stale_candidates(turn.conn, m.site, m.account, m.since,
                                                 m.until, m.most)
    return StaleTasks(matched, tuple(ids))
