"""Replies of the task actor, built from its rows; rendered to JSON at the HTTP edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from leasegate.actors.attempts import MAX_ERRORS, AttemptError, attempt_errors, outcome_error
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
class TaskSubmitted(JobSubmitted):
    task_id: str


@dataclass(frozen=True)
class Reclaim:
    """How an operator resolved a stale task."""

    action: str
    reason: str
    by: str
    at: Instant


@dataclass(frozen=True)
class TaskView(OfOneJob):
    """The task object, plus ``late_result`` (a stale task's last lease reported)."""

    task_id: str
    tenant: str
    site: str
    account: str
    kind: str
    params: JSONObject
    priority: int
    status: str
    device_id: str | None
    batch_total: int | None
    progress: JSONObject | None
    lease_owner: str | None
    lease_expires_at: Instant | None
    attempts: int
    cancel_requested: bool
    pause_requested: bool
    created_at: Instant
    updated_at: Instant
    started_at: Instant | None
    completed_at: Instant | None
    result: JSONValue
    error: JobError | None
    stale_reason: str | None
    reclaim: Reclaim | None
    billing: Billing | None
    late_result: bool
    errors: tuple[AttemptError, ...] = field(default=(), metadata={"description": (
        "The last 20 attempts' errors, oldest first (kept across operator retries).")})
    id_field: ClassVar[str] = "task_id"


@dataclass(frozen=True)
class TaskLease(OfOneJob):
    """A claim as handed to a worker: to be started before ``claim_expires_at``."""

    task_id: str
    site: str
    account: str
    kind: str
    params: JSONObject
    progress: JSONObject | None
    attempt: int
    lease_token: str
    claim_expires_at: Instant
    id_field: ClassVar[str] = "task_id"


@dataclass(frozen=True)
class Started:
    task_id: str
    status: str
    lease_expires_at: Instant
    cancel_requested: bool
    pause_requested: bool


@dataclass(frozen=True)
class Renewed:
    lease_expires_at: Instant
    cancel_requested: bool
    pause_requested: bool


Channel = Literal["tasks", "queries"]
# Where a worker was seen: the column of its last lease call on each channel.
SEEN_AT: tuple[tuple[Channel, str], ...] = (("tasks", "task_seen_at"),
                                            ("queries", "query_seen_at"))


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    state: Literal["online", "offline"]
    last_seen_at: Instant
    task_ids: tuple[str, ...]
    sites: tuple[str, ...] | None  # what its lease calls serve, on both channels; None: all
    channels: tuple[Channel, ...]  # where it was seen


@dataclass(frozen=True)
class ArtifactStored:
    """A task's artifact as stored: its name, size and digest."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class ArtifactInfo(ArtifactStored):
    """A stored artifact, and when it was stored (an item of the task's list)."""

    created_at: Instant


@dataclass(frozen=True)
class ArtifactList:
    items: tuple[ArtifactInfo, ...]


@dataclass(frozen=True)
class BlockedLane:
    site: str
    account: str
    task_id: str
    since: Instant


@dataclass(frozen=True)
class SiteQueue:
    """A site with queued tasks: how many, and whether an online worker serves it."""

    site: str
    queued: int = field(metadata={"description": "Queued tasks."})
    served: bool = field(metadata={"description": "An online worker serves the site."})


@dataclass(frozen=True)
class TaskHealthReport:
    """Stale tasks, queued tasks and the sites they wait on, counted in full; listed only
    for the ``top`` that matter most (the lanes blocked longest, the sites with the
    most queued), so that its size never follows the sites callers invent."""

    stale: int  # = blocked lanes: a stale task blocks its lane
    blocked_lanes: tuple[BlockedLane, ...]  # the longest blocked
    queued: int
    queued_sites: int
    unserved_sites: int  # sites with queued tasks that no online worker serves
    busiest: tuple[SiteQueue, ...]  # the sites with the most queued
    unserved: tuple[SiteQueue, ...]  # of the unserved sites, those with the most queued


def lease_expiry(row: Row) -> float | None:
    """The running lease's expiry, or the claim's while leased; None otherwise."""
    if row["status"] == "running":
        value: float | None = row["lease_expires_at"]
        return value
    if row["status"] == "leased":
        claim: float | None = row["claim_expires_at"]
        return claim
    return None


def task_view(row: Row) -> TaskView:
    reclaim = None
    if row["reclaim_action"] is not None:
        reclaim = Reclaim(row["reclaim_action"], row["reclaim_reason"], row["reclaim_by"],
                          row["reclaim_at"])
    return TaskView(
        task_id=row["task_id"], tenant=row["tenant"], site=row["site"], account=row["account"],
        kind=row["kind"], params=loads(row["params"]), priority=row["priority"],
        status=row["status"], device_id=row["device_id"], batch_total=row["batch_total"],
        progress=loads(row["progress"]), lease_owner=row["lease_owner"],
        lease_expires_at=lease_expiry(row), attempts=row["attempts"],
        cancel_requested=bool(row["cancel_requested"]),
        pause_requested=bool(row["pause_requested"]),
        created_at=row["created_at"], updated_at=row["updated_at"],
        started_at=row["started_at"], completed_at=row["completed_at"],
        result=loads(row["result"]), error=job_error(row), stale_reason=row["stale_reason"],
        reclaim=reclaim, billing=billing(row), late_result=bool(row["late_result"]),
        errors=task_errors(row))


def task_errors(row: Row) -> tuple[AttemptError, ...]:
    """The errors of the task's earlier attempts (kept by operator retries), then its
    own error's, if it has one: the latest ``MAX_ERRORS``."""
    current = outcome_error(row)
    kept = attempt_errors(row["errors"])
    return (*kept, current)[-MAX_ERRORS:] if current is not None else kept


def task_lease(row: Row) -> TaskLease:
    return TaskLease(
        task_id=row["task_id"], site=row["site"], account=row["account"], kind=row["kind"],
        params=loads(row["params"]), progress=loads(row["progress"]),
        attempt=row["attempts"] + 1, lease_token=row["lease_token"],
        claim_expires_at=row["claim_expires_at"])


def worker_view(row: Row, task_ids: list[str], online: bool) -> WorkerView:
    channels = tuple(name for name, column in SEEN_AT if row[column] is not None)
    filters = [loads(row[column]) for name, column in (("tasks", "sites"),
                                                       ("queries", "query_sites"))
               if name in channels]
    sites = None if not filters or None in filters else tuple(
        sorted({site for given in filters for site in given}))
    return WorkerView(row["worker_id"], "online" if online else "offline",
                      row["last_seen_at"], tuple(task_ids), sites, channels)


def artifact_info(row: Row) -> ArtifactInfo:
    return ArtifactInfo(row["name"], row["size"], row["sha256"], row["created_at"])
