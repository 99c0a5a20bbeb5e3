"""An operator's actions on queries, each message followed by its handler: retry one
query, find what a redrive retries, and take a site's dispatch controls from the task
actor (which keeps them in the ``sites`` table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from leasegate.actors.queries.ref import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QueryView, query_view
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.retry import (
    FindRetryable,
    Retryable,
    RetryJob,
    find_retryable,
    retry_job,
)
from leasegate.actors.queue.sites import QueuedAt, SiteControl, check_control
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import InvalidRequest
from leasegate.storage import operator_sql as sql

RETRYABLE = ("failed", "expired")


@dataclass(frozen=True)
class RetryQuery(RetryJob[Queries, QueryView]):
    """A failed or expired query back to ``queued``, its attempts counted afresh."""


@QUERIES.on(RetryQuery)
def retry(turn: QueryTurn, m: RetryQuery) -> QueryView:
    return query_view(retry_job(turn, m, RETRYABLE,
                                lambda row: turn.now + turn.settings.query_ttl))


@dataclass(frozen=True)
class RetryQueries(Batch[Queries, RetryQuery, QueryView]):
    """A redrive's retries (up to 100 a message), each on its own."""

    item = RetryQuery


QUERIES.each(RetryQueries, retry)


@dataclass(frozen=True)
class FindRetryableQueries(FindRetryable[Queries]):
    statuses: ClassVar[tuple[str, ...]] = RETRYABLE


@QUERIES.on(FindRetryableQueries)
def retryable(turn: QueryTurn, m: FindRetryableQueries) -> Retryable:
    return find_retryable(turn, m)


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
        if turn.sites.apply(control, turn.now):
            turn.work_may_be_available(*new_work(control.site))


@dataclass(frozen=True)
class QueriesQueuedAt(QueuedAt[Queries]):
    """Queued queries of each of these sites."""


@QUERIES.on(QueriesQueuedAt)
def queued_at(turn: QueryTurn, m: QueriesQueuedAt) -> tuple[tuple[str, int], ...]:
    counts = sql.queued_by_site(turn.conn, "query", list(m.sites))
    return tuple((site, counts.get(site, 0)) for site in m.sites)
