"""Replies of the query actor, built from its rows; rendered to JSON at the HTTP edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from leasegate.actors.attempts import AttemptError, attempt_errors
from leasegate.actors.views import (
    Billing,
    Instant,
    JobError,
    JobSubmitted,
    JSONObject,
    JSONValue,
    OfOneJob,
    billing,
    job_error,
    loads,
)
from leasegate.storage.engine import Row


@dataclass(frozen=True)
class QuerySubmitted(JobSubmitted):
    query_id: str


@dataclass(frozen=True)
class QueryView(OfOneJob):
    """The query object."""

    query_id: str
    tenant: str
    site: str
    kind: str
    params: JSONObject
    status: str
    lease_owner: str | None
    lease_expires_at: Instant | None
    attempts: int
    created_at: Instant
    updated_at: Instant
    completed_at: Instant | None
    result: JSONValue
    error: JobError | None
    billing: Billing | None
    max_attempts: int | None = None  # None: a query submitted before it was kept
    next_attempt_at: Instant | None = field(default=None, metadata={"description": (
        "While the query waits for a retry (queued): when it is leasable again.")})
    errors: tuple[AttemptError, ...] = field(default=(), metadata={"description": (
        "The last 20 attempts' errors, oldest first.")})
    id_field: ClassVar[str] = "query_id"


@dataclass(frozen=True)
class QueryLease(OfOneJob):
    """A query handed to a worker, to be answered before ``lease_expires_at``."""

    query_id: str
    site: str
    kind: str
    params: JSONObject
    attempt: int
    lease_token: str
    lease_expires_at: Instant
    id_field: ClassVar[str] = "query_id"


@dataclass(frozen=True)
class QueryCounts:
    """Live queries of one status: how many, on how many sites, and the sites with the
    most (most first; as many as were asked for)."""

    status: str
    n: int
    sites: int
    by_site: dict[str, int]


@dataclass(frozen=True)
class QuerySite:
    """A site with live queries."""

    site: str
    queued: int
    leased: int


def query_view(row: Row) -> QueryView:
    return QueryView(
        query_id=row["query_id"], tenant=row["tenant"], site=row["site"], kind=row["kind"],
        params=loads(row["params"]), status=row["status"],
        # a query waiting for its retry keeps its last lease's owner and token (a
        # repeated result is answered), but nobody holds it
        lease_owner=None if row["status"] == "queued" else row["lease_owner"],
        lease_expires_at=row["lease_expires_at"], attempts=row["attempts"],
        created_at=row["created_at"], updated_at=row["updated_at"],
        completed_at=row["completed_at"], result=loads(row["result"]), error=job_error(row),
        billing=billing(row), max_attempts=row["max_attempts"],
        next_attempt_at=row["next_attempt_at"], errors=attempt_errors(row["errors"]))


def query_lease(row: Row) -> QueryLease:
    return QueryLease(
        query_id=row["query_id"], site=row["site"], kind=row["kind"],
        params=loads(row["params"]), attempt=row["attempts"], lease_token=row["lease_token"],
        lease_expires_at=row["lease_expires_at"])
