"""An operator's retry, the same on both channels: a failed, expired (or, for tasks,
canceled) job back in line as a new attempt, its history kept; and the selection a
bulk retry ("redrive") works on.

Each channel names its messages (``RetryTask`` derives from :class:`RetryJob`), says
which statuses it retries, and registers them with :func:`serve_retries`; its turn
says when a retried job expires. The money (a billed job's hold, placed again before
the retry) is the jobs facade's business, as at submit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from leasegate.actors.channels import JobQueue
from leasegate.actors.checks import check_id, check_int, check_number, check_text
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.sites import check_reason
from leasegate.actors.queue.turn import QueueTurn
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import InvalidRequest, StateConflict
from leasegate.logs import escape
from leasegate.storage import operator_sql

A_contra = TypeVar("A_contra", contravariant=True)
Q = TypeVar("Q", bound=JobQueue)
QT = TypeVar("QT", bound=QueueTurn[Any])
V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)

MAX_REDRIVE = 10_000
log = logging.getLogger("leasegate.operator")


@dataclass(frozen=True)
class RetryJob(Ask[A_contra, V_co]):
    """Put one finished job back in line (an operator's, with why)."""

    job_id: str
    reason: str
    by: str  # the key that did it: "name (key_id)"

    def check(self) -> None:
        check_id("job_id", self.job_id)
        check_reason(self.reason)
        check_text("by", self.by, empty=False)


@dataclass(frozen=True)
class RetryCandidate:
    job_id: str
    tenant: str
    max_cost: int | None


@dataclass(frozen=True)
class Retryable:
    """What a redrive's filters match: how many, and the oldest ``limit`` of them."""

    matched: int
    jobs: tuple[RetryCandidate, ...]


@dataclass(frozen=True)
class Redrive:
    """A redrive's selection: the jobs of ``status`` (site, kind, tenant: None is any;
    ``since``/``until``: when they ended, wall seconds), the oldest ``limit`` of them."""

    status: str
    site: str | None = None
    kind: str | None = None
    tenant: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 1000


@dataclass(frozen=True)
class FindRetryable(Ask[A_contra, Retryable]):
    """The jobs a redrive would retry: those its ``selection`` matches."""

    selection: Redrive
    statuses: ClassVar[tuple[str, ...]] = ("failed", "expired")

    def check(self) -> None:
        selection = self.selection
        if not isinstance(selection, Redrive):
            raise InvalidRequest("selection must be a Redrive")
        if selection.status not in self.statuses:
            raise InvalidRequest(f"status must be one of {', '.join(self.statuses)} "
                                 f"(got {selection.status!r:.40})")
        for name in ("site", "kind", "tenant"):
            check_id(name, getattr(selection, name), optional=True)
        for name in ("since", "until"):
            check_number(name, getattr(selection, name), 0, 1e12, optional=True)
        check_int("limit", selection.limit, 1, MAX_REDRIVE)


def retry_job(turn: QueueTurn[V], m: RetryJob[Any, V], statuses: tuple[str, ...]) -> V:
    """``m``'s job requeued if it is in one of ``statuses`` (else 6003), to expire as
    its channel says (``QueueTurn.retry_expiry``), recorded as ``retried`` with who
    and why; the job after."""
    kind = turn.kind
    row = turn.visible(m.job_id, None)
    status = row["status"]
    if status not in statuses:
        raise StateConflict(f"{kind.noun} {m.job_id} is {status}; only a "
                            f"{' or '.join(statuses)} {kind.noun} can be retried")
    if not operator_sql.retry(turn.conn, kind.channel, m.job_id, status,
                              turn.retry_expiry(row), turn.kept_errors(row), turn.now):
        raise StateConflict(f"{kind.noun} {m.job_id} changed concurrently; try again")
    log.warning("%s retried by an operator: %s=%s was=%s by=%s reason=%s", kind.noun,
                kind.id_column, escape(m.job_id), status, escape(m.by), escape(m.reason))
    after = turn.current(m.job_id)
    turn.history.record(m.job_id, "retried", job=after, was=status, reason=m.reason, by=m.by)
    turn.work_may_be_available(*new_work(row["site"]))
    return turn.view(after)


def find_retryable(turn: QueueTurn[Any], m: FindRetryable[Any]) -> Retryable:
    s = m.selection
    matched, rows = operator_sql.redrive_candidates(
        turn.conn, turn.kind.channel, s.status,
        {"site": s.site, "kind": s.kind, "tenant": s.tenant}, s.since, s.until, s.limit)
    return Retryable(matched, tuple(RetryCandidate(r["job_id"], r["tenant"], r["max_cost"])
                                    for r in rows))


def serve_retries(handlers: Handlers[Q, QT], retry: type[RetryJob[Q, Any]],
                  retries: type[Batch[Q, Any, Any]], find: type[FindRetryable[Q]]) -> None:
    """Register on a queue's ``handlers`` its channel's retry messages: one job
    (``retry``), a redrive's (``retries``, each on its own) and the search for them
    (``find``, whose ``statuses`` are the ones a retry takes)."""
    def retry_one(turn: QueueTurn[V], m: RetryJob[Any, V]) -> V:
        return retry_job(turn, m, find.statuses)

    handlers.on(retry)(retry_one)
    handlers.each(retries, retry_one)
    handlers.on(find)(find_retryable)
