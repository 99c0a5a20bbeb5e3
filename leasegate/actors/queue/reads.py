"""Reading jobs, the same on both channels: one job (waiting until it settles when
asked to wait) and a job's history. Each queue names its own messages (``GetTask``
derives from :class:`GetJob`) and registers these handlers for them::

    @dataclass(frozen=True)
    class GetTask(GetJob[Tasks, TaskView]):
        \"\"\"A task; with ``wait``, it waits until it is settled.\"\"\"

    serve_reads(TASKS, GetTask)   # GetTask, GetHistory, ReadActivity, RecordSettled
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeVar

from leasegate.actors.channels import JobQueue, RecordSettled
from leasegate.actors.checks import check_flag, check_id
from leasegate.actors.queue.activity import ReadActivity, read_activity
from leasegate.actors.queue.history import History
from leasegate.actors.queue.leases import job_wait
from leasegate.actors.queue.turn import QueueTurn
from leasegate.actors.runtime.handlers import Handlers, Waiting
from leasegate.actors.runtime.mailbox import Ask, Tell
from leasegate.actors.runtime.turn import Turn
from leasegate.actors.runtime.waiters import NOT_YET, NotYet

A_contra = TypeVar("A_contra", contravariant=True)
Q = TypeVar("Q", bound=JobQueue)
QT = TypeVar("QT", bound=QueueTurn[Any])
V = TypeVar("V")


@dataclass(frozen=True)
class NoticedWork(Tell[JobQueue]):
    """Another gateway's commit may have made work for ``topics`` (``everything``: any
    parked message); offer it to the parked messages here."""

    topics: frozenset[Hashable] = frozenset()
    everything: bool = False
    # The runtime applies no turn for it when nothing parked waits on its topics.
    wakes_only: ClassVar[bool] = True


def heard(turn: Turn, m: NoticedWork) -> None:
    if m.everything:
        turn.heard_elsewhere()
    elif m.topics:
        turn.heard_elsewhere(*m.topics)


@dataclass(frozen=True)
class GetJob(Ask[A_contra, V]):
    """A job by id; one of another tenant is not found. With ``wait``, waiting until the
    job is settled (its kind's ``settled`` statuses)."""

    job_id: str
    tenant: str | None = None  # None: any tenant (admin)
    wait: bool = False

    def check(self) -> None:
        check_id("job_id", self.job_id)
        check_id("tenant", self.tenant, optional=True)
        check_flag("wait", self.wait)


def get_job(turn: QueueTurn[V], m: GetJob[Any, V]) -> V | NotYet:
    row = turn.visible(m.job_id, m.tenant)
    if m.wait and row["status"] not in turn.kind.settled:
        return NOT_YET
    return turn.view(row)


def _settled(turn: QueueTurn[V], m: GetJob[Any, V]) -> V | None:
    row = turn.kind.jobs.get(turn.conn, m.job_id)
    if row is None:  # purged while waiting
        return None
    return turn.view(row) if row["status"] in turn.kind.settled else None


def _as_it_is(turn: QueueTurn[V], m: GetJob[Any, V]) -> V:
    return turn.view(turn.visible(m.job_id, m.tenant))


WAIT_FOR_JOB: Final[Waiting[QueueTurn[Any], Any]] = Waiting(
    wait=lambda m: job_wait(m.job_id), serve=_settled, drained=_as_it_is)
"""A read that waits: woken by the job's every transition; at shutdown, the job as
it is now."""


@dataclass(frozen=True)
class GetHistory(Ask[JobQueue, History]):
    """A job's history, oldest first; a job of another tenant is not found."""

    job_id: str
    tenant: str | None = None  # None: any tenant (admin)

    def check(self) -> None:
        check_id("job_id", self.job_id)
        check_id("tenant", self.tenant, optional=True)


def read_history(turn: QueueTurn[Any], m: GetHistory) -> History:
    turn.visible(m.job_id, m.tenant)  # another tenant's job is not found, as when read
    return turn.history.read(m.job_id)


def record_settled(turn: QueueTurn[Any], m: RecordSettled) -> None:
    turn.history.record(m.job_id, "settled", outcome=m.outcome, charged=m.charged,
                        refunded=m.refunded)


def serve_reads(handlers: Handlers[Q, QT], get: type[GetJob[Q, Any]]) -> None:
    """Register on a queue's ``handlers`` what every queue does the same way: read one
    job (``get``, its channel's :class:`GetJob`), read a job's history and the
    channel's recent activity (``queue.activity``), record the
    ledger's settlement, and offer another gateway's work to the waiting messages."""
    handlers.may_wait(get, WAIT_FOR_JOB)(get_job)
    handlers.on(GetHistory)(read_history)
    handlers.on(ReadActivity)(read_activity)
    handlers.on(RecordSettled)(record_settled)
    handlers.on(NoticedWork)(heard)  # another gateway's work (several gateways)
