"""Request models of the operators' actions: retry, redrive, sites."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StringConstraints

from leasegate.actors.queue.retry import MAX_REDRIVE
from leasegate.actors.queue.sites import MAX_RATE, MAX_REASON
from leasegate.http.models.jobs import DateTime, Id, Strict
from leasegate.http.models.numbers import INTEGRAL

Reason = Annotated[str, StringConstraints(min_length=1, max_length=MAX_REASON)]


class ReasonBody(Strict):
    """Why (1-500 characters): recorded in the job's history with who did it."""

    reason: Reason


class CancelBody(Strict):
    """A cancel, pause or resume may say why (recorded in the task's history with who
    did it); no body says nothing."""

    reason: Reason | None = None


class RedriveBody(Strict):
    """A bulk retry of the jobs of ``status`` that match the filters (``since`` and
    ``until``: when they ended); the oldest ``limit`` of them."""

    reason: Reason
    status: Literal["failed", "expired", "canceled"]
    site: Id | None = None
    kind: Id | None = None
    tenant: Id | None = None
    since: DateTime | None = None
    until: DateTime | None = None
    dry_run: StrictBool = False
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_REDRIVE), INTEGRAL] = 1000


class QueryRedriveBody(RedriveBody):
    """The same for queries, which are never canceled."""

    status: Literal["failed", "expired"]


class BulkReclaimBody(Strict):
    """Resolve every stale task the filters match (``since`` and ``until``: when they
    went stale), the first ``limit`` to have gone stale, with one outcome for all."""

    reason: Reason
    action: Literal["requeue", "succeeded", "failed"]
    site: Id | None = None
    account: Id | None = None
    since: DateTime | None = None
    until: DateTime | None = None
    dry_run: StrictBool = False
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_REDRIVE), INTEGRAL] = 1000


class ThrottleBody(Strict):
    """At most this many leases a second of the site's jobs (null lifts it)."""

    leases_per_second: Annotated[StrictFloat, Field(gt=0, le=MAX_RATE)] | None  # 2 too
