"""Workers' results, the steps both channels share: one, or a batch of them set-based.

Each channel's result handler reads as the path a result takes, calling these steps
with its own values::

    verdicts = judge_results(turn, items, [m.task_id for m in items], _judge)
    finished = sql.finish_many(turn.conn, verdicts.finishes(), turn.now)
    if record_results(turn, verdicts, finished) is None: raise <its refusal>
    return verdicts.in_order()

The rows of the results are read at once, each result is judged against its job's row
by the channel (a refusal raised, a retry of the accepted result answered with the row
as it is, or the outcome to write, a :class:`Finish`), the accepted outcomes are written
in one UPDATE by the channel's SQL (which returns the rows after it), their history in
one insert, and the ledger is told of each job that ended with a hold. One result is a
batch of one, so the two ways never part.

What a worker reports with an outcome is checked the same on both channels
(:func:`check_report`): the result, the error (its code and message, and the
exception's ``type`` and a bounded ``traceback``) and the cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from leasegate.actors.checks import (
    INT32,
    MAX_AMOUNT,
    MAX_TEXT,
    check_int,
    check_json,
    check_text,
)
from leasegate.actors.queue.turn import QueueTurn
from leasegate.actors.runtime.turn import RetryItemByItem
from leasegate.errors import LeasegateError
from leasegate.storage.engine import Row

QT = TypeVar("QT", bound=QueueTurn[Any])
M = TypeVar("M")  # a result message
W = TypeVar("W")  # what the channel's ``finish_many`` writes of one result
V = TypeVar("V")  # the job's view


@dataclass(frozen=True)
class Finish(Generic[W]):
    """An accepted result: what its row takes (the channel's SQL row of named
    values) and its history event's detail."""

    write: W
    detail: dict[str, Any]


@dataclass(frozen=True)
class Accepted(Generic[M, W]):
    """A result its job takes: its place in the batch, its job, and what it writes."""

    at: int
    job_id: str
    message: M
    before: Row  # the job's row as the result found it
    finish: Finish[W]


@dataclass
class Verdicts(Generic[M, W, V]):
    """A batch of results judged: the answers known (refusals, retries of accepted
    results), the accepted ones to write."""

    count: int
    answers: dict[int, V | LeasegateError] = field(default_factory=dict)
    accepted: list[Accepted[M, W]] = field(default_factory=list)

    def finishes(self) -> list[W]:
        """What the accepted results write, for the channel's ``finish_many``."""
        return [a.finish.write for a in self.accepted]

    def in_order(self) -> list[V | LeasegateError]:
        """An answer per result, in the batch's order."""
        return [self.answers[at] for at in range(self.count)]


def judge_results(turn: QT, items: Sequence[M], job_ids: Sequence[str],
                  judge: Callable[[QT, M, Row], Row | Finish[W]]) -> Verdicts[M, W, Any]:
    """Each result (its job's id at the same place in ``job_ids``) judged against its
    job's row, all read at once: a refusal (``judge`` raises, or no such job) and a
    retry of the accepted result (``judge`` returns the row) are answered; an outcome
    to write is accepted."""
    rows = turn.kind.jobs.get_many(turn.conn, list(job_ids))
    verdicts: Verdicts[M, W, Any] = Verdicts(len(items))
    for at, (m, job_id) in enumerate(zip(items, job_ids, strict=True)):
        row = rows.get(job_id)
        try:
            if row is None:
                raise turn.kind.not_found(f"no {turn.kind.noun} {job_id}")
            verdict = judge(turn, m, row)
        except LeasegateError as exc:
            verdicts.answers[at] = exc
            continue
        if isinstance(verdict, Finish):
            verdicts.accepted.append(Accepted(at, job_id, m, row, verdict))
        else:
            verdicts.answers[at] = turn.view(verdict)
    return verdicts


def record_results(turn: QueueTurn[V], verdicts: Verdicts[M, W, V],
                   finished: Sequence[Row]) -> list[Row] | None:
    """The accepted results written (``finished``: the rows the channel's
    ``finish_many`` returned): their history in one insert, the ledger told of the
    jobs that ended with a hold, each one's view its answer; the rows after, in the
    order of ``verdicts.accepted``.

    None, with nothing recorded, when the one accepted result's lease changed between
    the read and the write (the channel raises its refusal); with more than one, raises
    :class:`RetryItemByItem` (PostgreSQL, another gateway: never within one turn)."""
    if len(finished) != len(verdicts.accepted):
        if len(verdicts.accepted) > 1:
            raise RetryItemByItem("a lease changed between the read and the write")
        return None
    by_id = {row[turn.kind.id_column]: row for row in finished}
    after = [by_id[a.job_id] for a in verdicts.accepted]
    turn.history.record_many("result", [
        (a.job_id, row, a.finish.detail) for a, row in zip(verdicts.accepted, after,
                                                             strict=True)])
    for a, row in zip(verdicts.accepted, after, strict=True):
        turn.settle.ended(row)
        verdicts.answers[a.at] = turn.view(row)
    return after


MAX_ERROR_TYPE: Final = 256
"""The longest exception type name taken (characters)."""
MAX_TRACEBACK: Final = 8192
"""The longest traceback taken (characters; the SDK cuts its at 8 KiB of UTF-8)."""


def check_report(result: object, error_code: int | None, error_message: str | None,
                 error_type: str | None, error_traceback: str | None,
                 cost: int | None) -> str | None:
    """A result message's report beside its outcome (``TaskResult``, ``QueryResult``):
    the result's text as stored (canonical JSON; None for none)."""
    text = check_json("result", result)
    check_int("error.code", error_code, -INT32 - 1, INT32, optional=True)
    check_text("error.message", error_message, optional=True, most=MAX_TEXT)
    check_error_detail(error_type, error_traceback)
    check_int("cost", cost, 0, MAX_AMOUNT, optional=True)
    return text


def check_error_detail(error_type: str | None, traceback: str | None) -> None:
    check_text("error.type", error_type, optional=True, most=MAX_ERROR_TYPE, empty=False)
    check_text("error.traceback", traceback, optional=True, most=MAX_TRACEBACK)


def detail_digest(error_type: str | None, traceback: str | None) -> tuple[str, ...]:
    """The parts a result's digest takes of the detail: none when there is none, so a
    retry of a result stored without it still matches its digest."""
    if error_type is None and traceback is None:
        return ()
    return (error_type or "", traceback or "")
