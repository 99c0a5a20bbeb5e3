"""The models of a worker's calls that go many in one: a lease call carrying the
results of the worker's previous jobs, and a renewal call for all its running tasks."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from leasegate.actors.queries.views import QueryLease
from leasegate.actors.tasks.views import Renewed, TaskLease
from leasegate.http.models.jobs import (
    PAYLOAD,
    Id,
    LeaseBody,
    QueryResultItem,
    Strict,
    TaskResultItem,
    Token,
    batch_of,
)
from leasegate.http.models.replies import BatchItem, QueryItem, TaskItem

_RESULTS = ("The outcomes of the worker's previous jobs (0 to 100), each fenced and "
            "answered on its own exactly as the results route answers it, in the reply's "
            "`results`, in order; they are applied before the lease, in the same commit.")


class TaskLeaseBody(LeaseBody):
    results: batch_of(TaskResultItem) | None = Field(  # type: ignore[valid-type]
        default=None, description=_RESULTS)


class QueryLeaseBody(LeaseBody):
    results: batch_of(QueryResultItem) | None = Field(  # type: ignore[valid-type]
        default=None, description=_RESULTS)


class TaskLeaseReply(BaseModel):
    items: list[TaskLease]
    results: list[TaskItem] | None = Field(
        default=None, description="Per result carried by the call, in order (only then).")


class QueryLeaseReply(BaseModel):
    items: list[QueryLease]
    results: list[QueryItem] | None = Field(
        default=None, description="Per result carried by the call, in order (only then).")


class RenewItem(Strict):
    task_id: Id
    lease_token: Token
    progress: dict[str, Any] | None = Field(default=None, description=PAYLOAD)


class RenewTasksBody(Strict):
    worker_id: Id
    items: batch_of(RenewItem)  # type: ignore[valid-type]


class RenewedItem(BatchItem):
    task: Renewed | None = None


class TasksRenewed(BaseModel):
    items: list[RenewedItem]

