"""An operator's actions on queries: retry one query and find what a redrive retries
(handled as on both channels, ``queue.retry``), and take a site's dispatch controls
from the task actor (which keeps them in the ``sites`` table), each message followed
by its handler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from leasegate.actors.queries import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QueryView
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.retry import FindRetryable, RetryJob, serve_retries
from leasegate.actors.queue.sites import (
    QueuedAt,
    SiteBacklog,
    SiteControl,
    backlogs,
    check_control,
)
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import InvalidRequest
from leasegate.storage import queries_sql


@dataclass(frozen=True)
class RetryQuery(RetryJob[Queries, QueryView]):
    """A failed or expired query back to ``queued``, its attempts counted afresh."""


@dataclass(frozen=True)
class RetryQueries(Batch[Queries, RetryQuery, QueryView]):
    """A redrive's retries (up to 100 a message), each on its own."""

    item = RetryQuery


@dataclass(frozen=True)
class FindRetryableQueries(FindRetryable[Queries]):
    statuses: ClassVar[tuple[str, ...]] = ("failed", "expired")


serve_retries(QUERIES, RetryQuery, RetryQueries, FindRetryableQueries)


@dataclass(frozen=True)
class ApplySiteControls(Ask[Queries, None]):
    """Sites' controls as the task actor keeps them (all at start-up, then each change)."""

    controls: tuple[SiteControl, ...]

    def check(self) -> None:
        if not isinstance(self.controls, tuple):
            raise InvalidRequest("controls must be a tuple")
        for control in self.controls:
            check_control(control)


@QUERIES.on(ApplySiteControls)
def apply_controls(turn: QueryTurn, m: ApplySiteControls) -> None:
    for control in m.controls:
        if turn.sites.apply(control):
            turn.work_may_be_available(*new_work(control.site))


@dataclass(frozen=True)
class QueriesQueuedAt(QueuedAt[Queries]):
    """Queued queries of each of these sites."""


@QUERIES.on(QueriesQueuedAt)
def queued_at(turn: QueryTurn, m: QueriesQueuedAt) -> tuple[SiteBacklog, ...]:
    return backlogs(turn, "query", m.sites, queries_sql.backlog)
