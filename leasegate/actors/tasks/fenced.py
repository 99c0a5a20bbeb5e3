"""The workers' fenced calls on a task: start, renew, result; each message followed by
its handler.

Each call must present the current lease (worker id and token); a repeat with the
same token and body after a lost reply returns the current state, and any other
mismatch is refused (6002) and logged with what the caller claimed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from leasegate.actors.checks import (
    MAX_TOKEN,
    check_choice,
    check_id,
    check_ids,
    check_json,
    check_text,
    keep_text,
    stored_text,
)
from leasegate.actors.payloads import canonical_json, fingerprint
from leasegate.actors.queue.leases import check_site, new_work
from leasegate.actors.queue.reports import (
    Finish,
    Verdicts,
    check_report,
    detail_digest,
    judge_results,
    record_results,
)
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.runtime.turn import answer_of_one, checked_once_each
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.actors.tasks.views import Renewed, Started, TaskView
from leasegate.actors.views import JSONObject, JSONValue
from leasegate.clock import iso
from leasegate.errors import LeasegateError, StateConflict, TaskLeaseInvalid
from leasegate.logs import escape
from leasegate.storage import tasks_sql as sql
from leasegate.storage.engine import Row

log = logging.getLogger("leasegate.tasks")

R_co = TypeVar("R_co", covariant=True)

TaskOutcome = Literal["succeeded", "failed", "canceled", "paused"]


@dataclass(frozen=True)
class Fenced(Ask[Tasks, R_co]):
    """A call made under a lease (its reply an ``R_co``): the fields every one has."""

    task_id: str
    worker_id: str
    lease_token: str

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_id("worker_id", self.worker_id)
        check_text("lease_token", self.lease_token, most=MAX_TOKEN, empty=False)


@dataclass(frozen=True)
class FencedOnSites(Fenced[R_co]):
    """A fenced call of a worker key that may be limited to ``sites`` (None: every
    site), whose task must be on one of them."""

    sites: tuple[str, ...] | None = field(default=None, kw_only=True)

    def check(self) -> None:
        super().check()
        check_ids("sites", self.sites)


def _leased_task(turn: TaskTurn, m: FencedOnSites[object]) -> Row:
    """The row of ``m``'s task (404 if unknown), if the caller's sites reach it (else 403)."""
    row = turn.visible(m.task_id, None)
    check_site(row["site"], m.sites)
    return row


@dataclass(frozen=True)
class StartTask(FencedOnSites[Started]):
    """The claim turned into a running lease (the attempt is burned here)."""


@TASKS.on(StartTask)
def start(turn: TaskTurn, m: StartTask) -> Started:
    """One start: a batch of one (:func:`_starts`), so that one and many never part."""
    return answer_of_one(_starts(turn, [m]))


def start_all(turn: TaskTurn, items: Sequence[StartTask]) -> list[Started | LeasegateError]:
    """A batch of starts, each answered as :func:`start` would answer it alone. Raises
    :class:`RetryItemByItem` (each item then goes in a savepoint of its own) before it
    writes anything when an item fails its checks or a task's start comes twice."""
    checked_once_each(items, lambda m: m.task_id, "a task's start twice")
    return _starts(turn, items)


def _starts(turn: TaskTurn, items: Sequence[StartTask]) -> list[Started | LeasegateError]:
    """The claims turned into running leases (the attempt is burned here), set-based:
    the tasks' rows in one read, the claims in one UPDATE, their history in one insert;
    a refusal is its item's answer (it wrote nothing). A repeat of the start that made
    a task run (a lost reply) gets its current state."""
    conn, now, kind = turn.conn, turn.now, turn.kind
    rows = sql.JOBS.get_many(conn, [m.task_id for m in items])
    answers: dict[int, Started | LeasegateError] = {}
    claims: list[tuple[int, StartTask, Row]] = []
    for at, m in enumerate(items):
        row = rows.get(m.task_id)
        try:
            if row is None:
                raise kind.not_found(f"no {kind.noun} {m.task_id}")
            check_site(row["site"], m.sites)
        except LeasegateError as exc:
            answers[at] = exc
            continue
        if row["status"] == "running" and _holds(row, m.worker_id, m.lease_token):
            turn.seen(m.worker_id)
            answers[at] = _started(row)
        else:
            claims.append((at, m, row))
    if claims:
        running = {row["task_id"]: row for row in sql.start_many(
            conn, [(m.task_id, m.lease_token, m.worker_id, now) for _, m, _ in claims],
            now + turn.settings.task_lease_ttl, now)}
        history: list[tuple[str, Row, dict[str, object]]] = []
        for at, m, row in claims:
            after = running.get(m.task_id)
            if after is None:
                answers[at] = _refuse("start", row, m.worker_id, m.lease_token)
                continue
            attempt = row["attempts"] + 1
            log.info("task started: task_id=%s worker=%s attempt=%d",
                     escape(m.task_id), escape(m.worker_id), attempt)
            history.append((m.task_id, after, {"worker_id": m.worker_id, "attempt": attempt}))
            turn.seen(m.worker_id)
            answers[at] = _started(after)
        turn.history.record_many("started", history)
    return [answers[at] for at in range(len(items))]


def _started(row: Row) -> Started:
    # The control flags too: a cancel may have come while the reply was lost,
    # and the worker should know before it touches the site.
    return Started(row["task_id"], "running", row["lease_expires_at"],
                   bool(row["cancel_requested"]), bool(row["pause_requested"]))


@dataclass(frozen=True)
class StartTasks(Batch[Tasks, StartTask, Started]):
    """Up to 100 starts, each fenced on its own (and each still explicit), applied
    set-based (:func:`start_all`)."""

    item = StartTask


TASKS.each(StartTasks, start, start_all)


@dataclass(frozen=True)
class RenewTask(FencedOnSites[Renewed]):
    progress: JSONObject | None = None

    progress_text = stored_text("progress")  # made once, by check()

    def check(self) -> None:
        super().check()
        keep_text(self, "progress_text", check_json(
            "progress", self.progress, object_only=self.progress is not None))


@TASKS.on(RenewTask)
def renew(turn: TaskTurn, m: RenewTask) -> Renewed:
    conn, now = turn.conn, turn.now
    row = _leased_task(turn, m)
    progress = m.progress_text
    lease_expires_at = now + turn.settings.task_lease_ttl
    if not sql.renew(conn, m.task_id, m.worker_id, m.lease_token, lease_expires_at,
                     progress, now):
        raise _refuse("renew", row, m.worker_id, m.lease_token)
    turn.seen(m.worker_id)
    if progress is not None and progress != row["progress"]:  # not every renewal
        turn.history.record(m.task_id, "renewed", progress=m.progress)
    row = turn.current(m.task_id)
    return Renewed(lease_expires_at, bool(row["cancel_requested"]),
                   bool(row["pause_requested"]))


@dataclass(frozen=True)
class RenewTasks(Batch[Tasks, RenewTask, Renewed]):
    """Up to 100 renewals (a worker's running tasks in one call), each fenced and
    answered on its own with the task's cancel and pause requests."""

    item = RenewTask


TASKS.each(RenewTasks, renew)


@dataclass(frozen=True)
class TaskResult(FencedOnSites[TaskView]):
    outcome: TaskOutcome
    result: JSONValue = None
    error_code: int | None = None
    error_message: str | None = None
    cost: int | None = None
    progress: JSONObject | None = None
    error_type: str | None = None
    error_traceback: str | None = None

    result_text = stored_text("result")  # made once, by check()

    progress_text = stored_text("progress")  # made once, by check()

    def check(self) -> None:
        super().check()
        check_choice("outcome", self.outcome, TaskOutcome)
        keep_text(self, "result_text", check_report(
            self.result, self.error_code, self.error_message, self.error_type,
            self.error_traceback, self.cost))
        keep_text(self, "progress_text", check_json(
            "progress", self.progress, object_only=self.progress is not None))


@TASKS.on(TaskResult)
def result(turn: TaskTurn, m: TaskResult) -> TaskView:
    """One result: a batch of one (:func:`_results`), so that one and many never part."""
    return answer_of_one(_results(turn, [m]))


def result_all(turn: TaskTurn, items: Sequence[TaskResult]) -> list[TaskView | LeasegateError]:
    """A batch of results, each answered as :func:`result` would answer it alone. Raises
    :class:`RetryItemByItem` (each item then goes in a savepoint of its own) before it writes
    anything when an item fails its checks or a task's result comes twice, and after,
    when a lease changed between the read and the write (PostgreSQL, another gateway)."""
    checked_once_each(items, lambda m: m.task_id, "a task's result twice")
    return _results(turn, items)


def _results(turn: TaskTurn, items: Sequence[TaskResult]) -> list[TaskView | LeasegateError]:
    """Each result judged against its task's row (all read at once), the accepted ones
    written in one UPDATE and their history in one insert (see ``queue.reports``); a
    refusal is its item's answer (it wrote nothing)."""
    verdicts: Verdicts[TaskResult, sql.TaskFinish, TaskView] = judge_results(
        turn, items, [m.task_id for m in items], _judge)
    if verdicts.accepted:
        finished = sql.finish_many(turn.conn, verdicts.finishes(), turn.now)
        after = record_results(turn, verdicts, finished)
        if after is None:
            [one] = verdicts.accepted
            raise _refuse("result", one.before, one.message.worker_id,
                          one.message.lease_token)
        for accepted, row in zip(verdicts.accepted, after, strict=True):
            _done(turn, accepted.message, accepted.before, row)
    return verdicts.in_order()


def _judge(turn: TaskTurn, m: TaskResult, row: Row) -> Row | Finish[sql.TaskFinish]:
    """The task's row if ``m`` is a retry of its accepted result, else what the result
    writes; a result the task does not take is refused (6002, logged)."""
    check_site(row["site"], m.sites)
    if m.outcome == "paused" and row["batch_total"] is None:
        raise StateConflict(f"task {m.task_id} is not a batch task (no batch_total): "
                            "outcome paused is only for batch tasks")
    result, progress = m.result_text, m.progress_text
    digest = fingerprint(m.outcome, result, m.error_code, m.error_message, m.cost, progress,
                         *detail_digest(m.error_type, m.error_traceback))
    ours = _holds(row, m.worker_id, m.lease_token)
    status = row["status"]
    if status in sql.TERMINAL or status == "paused":
        if ours and row["outcome_digest"] == digest:
            turn.seen(m.worker_id)
            return row  # a retry of the accepted result
        raise _refuse("result", row, m.worker_id, m.lease_token,
                      f"the task is already {status}; no further result is accepted")
    if not ours or status not in ("running", "stale"):
        raise _refuse("result", row, m.worker_id, m.lease_token)
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
    kept = m.outcome != "succeeded"  # an error's type and traceback, or none left over
    write = sql.TaskFinish(
        job_id=m.task_id, from_status=status, lease_token=m.lease_token, status=to,
        result=result, error_code=code, error_message=message, cost=m.cost,
        progress=progress, outcome_digest=digest, late_result=int(late),
        error_type=m.error_type if kept else None,
        error_traceback=m.error_traceback if kept else None)
    return Finish(write, {"outcome": m.outcome, "late": late, "worker_id": m.worker_id,
                          "cost": m.cost})


def _done(turn: TaskTurn, m: TaskResult, before: Row, after: Row) -> None:
    """What an accepted result does beside its row and its history: the worker seen,
    its lane free."""
    if before["status"] == "stale":
        log.warning("late result accepted for stale task: task_id=%s worker=%s outcome=%s "
                    "stale_reason=%s", escape(m.task_id), escape(m.worker_id), m.outcome,
                    escape(before["stale_reason"]))
    turn.seen(m.worker_id)
    turn.work_may_be_available(*new_work(before["site"]))  # lane free


@dataclass(frozen=True)
class TaskResults(Batch[Tasks, TaskResult, TaskView]):
    """Up to 100 results, each fenced on its own (applied set-based: :func:`result_all`)."""

    item = TaskResult


TASKS.each(TaskResults, result, result_all)


def _holds(row: Row, worker_id: str, token: str) -> bool:
    return bool(row["lease_owner"] == worker_id and row["lease_token"] == token)

def _refuse(call: str, row: Row, worker_id: str, token: str,
        reason: str | None = None) -> LeasegateError:
    """A fenced call that does not hold the task's current lease: 6002, logged."""
    status = row["status"]
    if reason is None:
        if status == "queued":
            # Not "queued again": the token may be another task's, this one never leased.
            reason = ("the lease token is not this task's lease: the task is queued and "
                      "holds none (a claim of it ends when it expires or is given back)")
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
