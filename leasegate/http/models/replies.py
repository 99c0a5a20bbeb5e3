"""Reply models: what ``/openapi.json`` says each route answers (documentation only:
routes return plain JSON-able values, see ``render``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from leasegate.http.models.jobs import Timestamp


class ErrorInfo(BaseModel):
    code: int
    type: str
    message: str


class ErrorEnvelope(BaseModel):
    error: ErrorInfo


class Submitted(BaseModel):
    status: str
    created: bool


class QuerySubmitted(Submitted):
    query_id: str
    site_paused: bool = Field(False, description=(
        "true when the site is paused: the query waits queued (left out otherwise)."))


class TaskSubmitted(Submitted):
    task_id: str
    site_paused: bool = Field(False, description=(
        "true when the site is paused: the task waits queued (left out otherwise)."))


class JobError(BaseModel):
    code: int | None
    message: str
    type: str | None
    traceback: str | None


class Billing(BaseModel):
    max_cost: int | None
    charged: int | None
    refunded: int | None
    hold_status: str | None


class AttemptError(BaseModel):
    attempt: int
    at: Timestamp
    worker_id: str | None
    code: int | None
    type: str | None
    message: str
    traceback: str | None


class QueryObject(BaseModel):
    query_id: str
    tenant: str
    site: str
    kind: str
    params: dict[str, Any]
    status: str
    lease_owner: str | None
    lease_expires_at: Timestamp | None
    attempts: int
    created_at: Timestamp
    updated_at: Timestamp
    completed_at: Timestamp | None
    result: Any
    error: JobError | None
    billing: Billing | None
    max_attempts: int | None
    next_attempt_at: Timestamp | None = Field(
        description="While the query waits for a retry (queued): when it is leasable again.")
    errors: list[AttemptError] = Field(description="The last 20 attempts' errors, oldest first.")


class Reclaim(BaseModel):
    action: str
    reason: str
    by: str
    at: Timestamp


class TaskObject(BaseModel):
    task_id: str
    tenant: str
    site: str
    account: str
    kind: str
    params: dict[str, Any]
    priority: int
    status: str
    device_id: str | None
    batch_total: int | None
    progress: dict[str, Any] | None
    lease_owner: str | None
    lease_expires_at: Timestamp | None
    attempts: int
    cancel_requested: bool
    pause_requested: bool
    created_at: Timestamp
    updated_at: Timestamp
    started_at: Timestamp | None
    completed_at: Timestamp | None
    result: Any
    error: JobError | None
    stale_reason: str | None
    reclaim: Reclaim | None
    billing: Billing | None
    late_result: bool
    errors: list[AttemptError] = Field(description=(
        "The last 20 attempts' errors, oldest first (kept across operator retries)."))


class QueryLease(BaseModel):
    query_id: str
    site: str
    kind: str
    params: dict[str, Any]
    attempt: int
    lease_token: str
    lease_expires_at: Timestamp


class TaskLease(BaseModel):
    task_id: str
    site: str
    account: str
    kind: str
    params: dict[str, Any]
    progress: dict[str, Any] | None
    attempt: int
    lease_token: str
    claim_expires_at: Timestamp


class Started(BaseModel):
    task_id: str
    status: str
    lease_expires_at: Timestamp
    cancel_requested: bool
    pause_requested: bool


class BatchItem(BaseModel):
    status: int = Field(description="The HTTP status this item would have had alone.")
    error: ErrorInfo | None = Field(default=None, description="When the item was refused.")


class TaskSubmittedItem(BatchItem):
    task: TaskSubmitted | None = None


class QuerySubmittedItem(BatchItem):
    query: QuerySubmitted | None = None


class StartedItem(BatchItem):
    task: Started | None = None


class TaskItem(BatchItem):
    task: TaskObject | None = None


class QueryItem(BatchItem):
    query: QueryObject | None = None


class TasksSubmitted(BaseModel):
    items: list[TaskSubmittedItem]


class QueriesSubmitted(BaseModel):
    items: list[QuerySubmittedItem]


class TasksStarted(BaseModel):
    items: list[StartedItem]


class TaskItems(BaseModel):
    items: list[TaskItem]


class QueryItems(BaseModel):
    items: list[QueryItem]


class Renewed(BaseModel):
    lease_expires_at: Timestamp
    cancel_requested: bool
    pause_requested: bool


class ListPage(BaseModel):
    total: int
    limit: int
    offset: int


class Searched(BaseModel):
    rows: int = Field(description="How many jobs the text search read (the newest "
                                  "matching the other filters; at most 10,000).")
    complete: bool = Field(description="Whether those were all the jobs the other "
                                       "filters match (else narrow them to reach older "
                                       "ones).")


class QueryPage(ListPage):
    items: list[QueryObject]
    searched: Searched | None = Field(description="With `text`: how much was read.")


class TaskPage(ListPage):
    items: list[TaskObject]
    searched: Searched | None = Field(description="With `text`: how much was read.")


class WorkerObject(BaseModel):
    worker_id: str
    state: Literal["online", "offline"]
    last_seen_at: Timestamp
    task_ids: list[str]
    sites: list[str] | None
    channels: list[Literal["tasks", "queries"]]


class WorkerPage(ListPage):
    items: list[WorkerObject]


class TaskSiteObject(BaseModel):
    site: str
    queued: int = Field(description="Queued tasks.")
    served: bool = Field(description="An online worker serves the site.")


class TaskSitePage(ListPage):
    items: list[TaskSiteObject]


class QuerySiteObject(BaseModel):
    site: str
    queued: int
    leased: int


class QuerySitePage(ListPage):
    items: list[QuerySiteObject]


class KeyObject(BaseModel):
    key_id: str
    role: str
    name: str
    tenant: str | None
    sites: list[str] | None
    created_at: Timestamp
    revoked_at: Timestamp | None


class CreatedKey(KeyObject):
    key: str


class KeyPage(ListPage):
    items: list[KeyObject]


class QueuedCounts(BaseModel):
    tasks: int
    queries: int


class HealthChecks(BaseModel):
    """Counts only: the public answer's size never grows with sites or tenants."""

    storage_writable: bool
    stale_tasks: int
    blocked_lanes: int
    sites_without_worker: int
    queued: QueuedCounts
    leased_queries: int
    jobs: int
    failing_jobs: int
    overdue_jobs: int = Field(description="Periodic jobs that have not run for three of "
                              "their intervals (counted from start-up until their first run).")
    draining: bool
    ledger_ok: bool = Field(description="The last ledger audit (at start-up, every "
                            "`ledger_audit_interval`, or on GET /v1/ledger/audit) passed.")
    durable: bool = Field(description="The storage keeps \"durable before acknowledged\"; "
                          "false only when served with `unsafe_durability` (e.g. "
                          "`sqlite_synchronous` OFF or NORMAL). Does not make the status "
                          "`degraded`: it is the operator's standing choice.")


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    checks: HealthChecks
    details: dict[str, Any] | None = Field(
        default=None, description="Admin keys only: blocked lanes (account, task, since), "
        "sites without a worker, queue depths by site (the 20 of each that matter most; "
        "`unlisted`: how many each leaves out; `see_all`: the routes that page through "
        "them), every periodic job, the settings that make the storage not durable.")


class BackupMade(BaseModel):
    path: str
    bytes: int


class ArtifactStored(BaseModel):
    name: str
    size: int
    sha256: str


class ArtifactInfo(ArtifactStored):
    created_at: Timestamp


class ArtifactList(BaseModel):
    items: list[ArtifactInfo]
