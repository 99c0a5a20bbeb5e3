"""Submitting tasks, each message followed by its handler."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from leasegate.actors.checks import (
    INT32,
    check_id,
    check_int,
    check_number,
)
from leasegate.actors.payloads import fingerprint
from leasegate.actors.queue.submissions import NewJob, Submit, submit_all, submit_one
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.turn import checked
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.actors.tasks.views import TaskSubmitted
from leasegate.storage import tasks_sql as sql

MAX_PRIORITY: Final = 9
# Far enough either way for any date-time (years 1-9999), near enough that SQLite's
# REAL keeps whole seconds. A not_before in the past is simply "now".
MAX_INSTANT: Final = 2**40


@dataclass(frozen=True)
class SubmitTask(Submit[Tasks, TaskSubmitted]):
    task_id: str | None = None
    account: str = "-"
    priority: int = 0
    not_before: float | None = None
    device_id: str | None = None
    batch_total: int | None = None
    max_cost: int | None = None
    id_field: ClassVar[str] = "task_id"

    def check(self) -> None:
        super().check()
        check_id("account", self.account)
        check_id("device_id", self.device_id, optional=True)
        check_int("priority", self.priority, 0, MAX_PRIORITY)
        check_number("not_before", self.not_before, -MAX_INSTANT, MAX_INSTANT, optional=True)
        check_int("batch_total", self.batch_total, 1, INT32, optional=True)


@TASKS.on(SubmitTask)
def submit(turn: TaskTurn, m: SubmitTask) -> TaskSubmitted:
    """One submit: created, or an identical replay of its id (else 6004)."""
    return submit_one(turn, m, _new_task(turn, m), TaskSubmitted, sql.JOBS)


def submit_tasks(turn: TaskTurn, items: Sequence[SubmitTask]) -> list[TaskSubmitted]:
    """A batch of submits set-based (see ``submit_all``)."""
    return submit_all(turn, items, [_new_task(turn, m) for m in checked(items)],
                      TaskSubmitted, sql.JOBS)


TASKS.locks(SubmitTask, lambda m: sql.JOBS.submit_scope(m.job_id))


def _new_task(turn: TaskTurn, m: SubmitTask) -> NewJob:
    now = turn.now
    params = m.params_text  # made once, by the check; the fingerprint takes it too
    digest = fingerprint(m.tenant, m.site, m.account, m.kind, params, m.priority,
                         m.not_before, m.device_id, m.batch_total, m.max_cost)
    return NewJob({
        "tenant": m.tenant, "site": m.site, "account": m.account, "kind": m.kind,
        "params": params, "priority": m.priority, "not_before": m.not_before,
        "device_id": m.device_id, "batch_total": m.batch_total, "max_cost": m.max_cost,
        "fingerprint": digest, "status": "queued", "created_at": now, "updated_at": now,
        "expires_at": turn.ttl_deadline(m.not_before)},
        digest, leasable=m.not_before is None or m.not_before <= now)


@dataclass(frozen=True)
class SubmitTasks(Batch[Tasks, SubmitTask, TaskSubmitted]):
    """Up to 100 submits, each idempotent on its own, in one group commit (set-based:
    one insert of the new tasks, one of their history)."""

    item = SubmitTask


TASKS.each(SubmitTasks, submit, submit_tasks)
TASKS.locks_each(SubmitTasks, lambda m: sql.JOBS.submit_scope(m.job_id))
