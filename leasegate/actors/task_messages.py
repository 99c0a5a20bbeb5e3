"""Messages of the task actor: what the HTTP layer (and tests) may ask of it.

Each is a frozen dataclass; its reply is described in its docstring or in
API.md ("Tasks"). Times are wall seconds (the one clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leasegate.actors.common import Page
from leasegate.artifacts import Staged

MAX_LEASES = 10
OUTCOMES = ("succeeded", "failed", "canceled", "paused")
RECLAIM_ACTIONS = ("requeue", "succeeded", "failed")


@dataclass(frozen=True)
class SubmitTask:
    tenant: str
    site: str
    kind: str
    params: dict[str, Any]
    task_id: str | None = None
    account: str = "-"
    priority: int = 0
    not_before: float | None = None
    device_id: str | None = None
    batch_total: int | None = None
    max_cost: int | None = None


@dataclass(frozen=True)
class GetTask:
    task_id: str
    tenant: str | None = None  # None: any tenant (admin)


@dataclass(frozen=True)
class ListTasks:
    tenant: str | None = None
    status: str | None = None
    site: str | None = None
    account: str | None = None
    kind: str | None = None
    page: Page = Page()


@dataclass(frozen=True)
class CancelTask:
    task_id: str
    tenant: str | None = None


@dataclass(frozen=True)
class LeaseTasks:
    worker_id: str
    sites: tuple[str, ...] | None = None  # None: every site
    max: int = 1  # 1–10 distinct lanes
    request_id: str | None = None
    wait: bool = False  # park until work appears


@dataclass(frozen=True)
class StartTask:
    task_id: str
    worker_id: str
    lease_token: str
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)


@dataclass(frozen=True)
class RenewTask:
    task_id: str
    worker_id: str
    lease_token: str
    progress: dict[str, Any] | None = None
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)


@dataclass(frozen=True)
class TaskResult:
    task_id: str
    worker_id: str
    lease_token: str
    outcome: str  # "succeeded" | "failed" | "canceled" | "paused" (batch tasks)
    result: Any = None
    error_code: int | None = None
    error_message: str | None = None
    cost: int | None = None
    progress: dict[str, Any] | None = None
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)


@dataclass(frozen=True)
class ReclaimTask:
    task_id: str
    action: str  # "requeue" | "succeeded" | "failed"
    reason: str
    by: str  # the key (or operator) that did it
    result: Any = None
    cost: int | None = None


@dataclass(frozen=True)
class PauseTask:
    task_id: str
    tenant: str | None = None


@dataclass(frozen=True)
class ResumeTask:
    task_id: str
    tenant: str | None = None


@dataclass(frozen=True)
class ReleaseTaskLeases:
    """Leases handed to a caller that was already gone: back to ``queued``."""

    leases: tuple[tuple[str, str], ...]  # (task_id, lease_token)


@dataclass(frozen=True)
class ListWorkers:
    page: Page = Page()


@dataclass(frozen=True)
class TaskHealth:
    pass


# ---- the actor ------------------------------------------------------------------


@dataclass(frozen=True)
class RecordArtifact:
    """A staged upload of the lease holder (leased or running) → ``{name, size, sha256}``."""

    task_id: str
    worker_id: str
    lease_token: str
    name: str
    staged: Staged
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)


@dataclass(frozen=True)
class ListArtifacts:
    """→ ``{"items": [{name, size, sha256, created_at}]}``."""

    task_id: str
    tenant: str | None = None


@dataclass(frozen=True)
class FindArtifact:
    """→ ``{name, size, sha256, created_at}``, or ArtifactNotFound (6009)."""

    task_id: str
    name: str
    tenant: str | None = None


@dataclass(frozen=True)
class ExistingTasks:
    """→ the subset of ``task_ids`` that have a task record (for the orphan sweep)."""

    task_ids: tuple[str, ...]
