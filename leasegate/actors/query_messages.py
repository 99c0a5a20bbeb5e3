"""Messages of the query actor: what the HTTP layer (and tests) may ask of it.

Each request names its reply type (``Ask[...]``, see ``query_views``) and
checks its own fields. Times are wall seconds (the one clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from leasegate.actors.batches import MAX_BATCH, Batch
from leasegate.actors.checks import (
    INT32,
    MAX_AMOUNT,
    MAX_TEXT,
    MAX_TOKEN,
    check_choice,
    check_flag,
    check_id,
    check_ids,
    check_int,
    check_job_id,
    check_json,
    check_leases,
    check_page,
    check_text,
)
from leasegate.actors.mailbox import Ask, Tell
from leasegate.actors.pages import MAX_LIMIT, Page, Paged
from leasegate.actors.query_views import (
    QueryCounts,
    QueryLease,
    QuerySite,
    QuerySubmitted,
    QueryView,
)
from leasegate.actors.views import JSONObject, JSONValue
from leasegate.storage.queries_sql import TERMINAL as TERMINAL

QueryStatus = Literal["queued", "leased", "succeeded", "failed", "expired"]
QueryOutcome = Literal["succeeded", "failed"]
MAX_LEASES: Final = MAX_BATCH


@dataclass(frozen=True)
class SubmitQuery(Ask[QuerySubmitted]):
    tenant: str
    site: str
    kind: str
    params: JSONObject = field(default_factory=dict)
    query_id: str | None = None
    max_cost: int | None = None

    def check(self) -> None:
        for name, value in (("tenant", self.tenant), ("site", self.site), ("kind", self.kind)):
            check_id(name, value)
        check_job_id("query_id", self.query_id)
        check_json("params", self.params, optional=False, object_only=True)
        check_int("max_cost", self.max_cost, 0, MAX_AMOUNT, optional=True)


@dataclass(frozen=True)
class GetQuery(Ask[QueryView]):
    query_id: str
    tenant: str | None = None  # None: any tenant (admin)
    wait: bool = False  # park until the query is terminal

    def check(self) -> None:
        check_id("query_id", self.query_id)
        check_id("tenant", self.tenant, optional=True)
        check_flag("wait", self.wait)


@dataclass(frozen=True)
class ListQueries(Ask[Paged[QueryView]]):
    tenant: str | None = None
    status: QueryStatus | None = None
    site: str | None = None
    kind: str | None = None
    page: Page = Page()

    def check(self) -> None:
        if self.status is not None:
            check_choice("status", self.status, QueryStatus)
        for name, value in (("tenant", self.tenant), ("site", self.site), ("kind", self.kind)):
            check_id(name, value, optional=True)
        check_page(self.page)


@dataclass(frozen=True)
class LeaseQueries(Ask[tuple[QueryLease, ...]]):
    worker_id: str
    sites: tuple[str, ...] | None = None  # None: every site
    max: int = 1
    request_id: str | None = None
    wait: bool = False  # park until work appears

    def check(self) -> None:
        check_id("worker_id", self.worker_id)
        check_ids("sites", self.sites)
        check_int("max", self.max, 1, MAX_LEASES)
        check_id("request_id", self.request_id, optional=True)
        check_flag("wait", self.wait)


@dataclass(frozen=True)
class QueryResult(Ask[QueryView]):
    query_id: str
    worker_id: str
    lease_token: str
    outcome: QueryOutcome
    result: JSONValue = None
    error_code: int | None = None
    error_message: str | None = None
    cost: int | None = None
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)

    def check(self) -> None:
        check_id("query_id", self.query_id)
        check_id("worker_id", self.worker_id)
        check_text("lease_token", self.lease_token, most=MAX_TOKEN, empty=False)
        check_choice("outcome", self.outcome, QueryOutcome)
        check_json("result", self.result)
        check_int("error.code", self.error_code, -INT32 - 1, INT32, optional=True)
        check_text("error.message", self.error_message, optional=True, most=MAX_TEXT)
        check_int("cost", self.cost, 0, MAX_AMOUNT, optional=True)
        check_ids("sites", self.sites)


@dataclass(frozen=True)
class SubmitQueries(Batch[SubmitQuery, QuerySubmitted]):
    """Up to 100 submits, each idempotent on its own, in one group commit."""

    item = SubmitQuery


@dataclass(frozen=True)
class QueryResults(Batch[QueryResult, QueryView]):
    """Up to 100 results, each fenced on its own."""

    item = QueryResult


@dataclass(frozen=True)
class ReleaseQueryLeases(Tell):
    """Leases handed to a caller that was already gone: back to ``queued``."""

    leases: tuple[tuple[str, str], ...]  # (query_id, lease_token)

    def check(self) -> None:
        check_leases(self.leases)


@dataclass(frozen=True)
class CountQueries(Ask[tuple[QueryCounts, ...]]):
    """Live queries (queued, leased): counts, and the ``top`` sites of each status (for
    /health and /metrics; 0: counts only)."""

    top: int = 0

    def check(self) -> None:
        check_int("top", self.top, 0, MAX_LIMIT)


@dataclass(frozen=True)
class ListQuerySites(Ask[Paged[QuerySite]]):
    """Sites with live queries, the most first (then by name)."""

    page: Page = Page()

    def check(self) -> None:
        check_page(self.page)


def release_message(leases: tuple[QueryLease, ...]) -> ReleaseQueryLeases | None:
    """What gives back leases their caller never received (None: nothing to give)."""
    if not leases:
        return None
    return ReleaseQueryLeases(tuple((lease.query_id, lease.lease_token) for lease in leases))
