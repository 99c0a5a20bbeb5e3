"""Messages of the task actor: what the HTTP layer (and tests) may ask of it.

Each request names its reply type (``Ask[...]``, see ``task_views``) and
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
    check_number,
    check_page,
    check_text,
)
from leasegate.actors.mailbox import Ask, Tell
from leasegate.actors.pages import MAX_LIMIT, Page, Paged
from leasegate.actors.task_views import (
    ArtifactInfo,
    ArtifactList,
    ArtifactStored,
    Renewed,
    SiteQueue,
    Started,
    TaskHealthReport,
    TaskLease,
    TaskSubmitted,
    TaskView,
    WorkerView,
)
from leasegate.actors.views import JSONObject, JSONValue
from leasegate.errors import InvalidRequest
from leasegate.ids import ARTIFACT_NAME_RULE, is_artifact_name
from leasegate.storage.tasks_sql import TERMINAL as TERMINAL

TaskStatus = Literal["queued", "leased", "running", "succeeded", "failed", "canceled",
                     "paused", "stale", "expired"]
TaskOutcome = Literal["succeeded", "failed", "canceled", "paused"]
ReclaimAction = Literal["requeue", "succeeded", "failed"]
ControlAction = Literal["cancel", "pause", "resume"]
SETTLED: Final = (*TERMINAL, "stale", "paused")
"""Where a task waits for nobody but a person: a ``GET ?wait_seconds`` returns there."""
MAX_LEASES: Final = MAX_BATCH  # distinct lanes
MAX_PRIORITY: Final = 9
# Far enough either way for any date-time (years 1-9999), near enough that SQLite's
# REAL keeps whole seconds. A not_before in the past is simply "now".
MAX_INSTANT: Final = 2**40


@dataclass(frozen=True)
class SubmitTask(Ask[TaskSubmitted]):
    tenant: str
    site: str
    kind: str
    params: JSONObject = field(default_factory=dict)
    task_id: str | None = None
    account: str = "-"
    priority: int = 0
    not_before: float | None = None
    device_id: str | None = None
    batch_total: int | None = None
    max_cost: int | None = None

    def check(self) -> None:
        for name, value in (("tenant", self.tenant), ("site", self.site),
                            ("account", self.account), ("kind", self.kind)):
            check_id(name, value)
        check_job_id("task_id", self.task_id)
        check_id("device_id", self.device_id, optional=True)
        check_json("params", self.params, optional=False, object_only=True)
        check_int("priority", self.priority, 0, MAX_PRIORITY)
        check_number("not_before", self.not_before, -MAX_INSTANT, MAX_INSTANT, optional=True)
        check_int("batch_total", self.batch_total, 1, INT32, optional=True)
        check_int("max_cost", self.max_cost, 0, MAX_AMOUNT, optional=True)


@dataclass(frozen=True)
class GetTask(Ask[TaskView]):
    task_id: str
    tenant: str | None = None  # None: any tenant (admin)
    wait: bool = False  # park until the task is settled (SETTLED)

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_id("tenant", self.tenant, optional=True)
        check_flag("wait", self.wait)


@dataclass(frozen=True)
class ListTasks(Ask[Paged[TaskView]]):
    tenant: str | None = None
    status: TaskStatus | None = None
    site: str | None = None
    account: str | None = None
    kind: str | None = None
    page: Page = Page()

    def check(self) -> None:
        if self.status is not None:
            check_choice("status", self.status, TaskStatus)
        for name, value in (("tenant", self.tenant), ("site", self.site),
                            ("account", self.account), ("kind", self.kind)):
            check_id(name, value, optional=True)
        check_page(self.page)


@dataclass(frozen=True)
class ControlTask(Ask[TaskView]):
    """A client's (or an admin's) cancel, pause or resume of one task."""

    task_id: str
    action: ControlAction
    tenant: str | None = None

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_choice("action", self.action, ControlAction)
        check_id("tenant", self.tenant, optional=True)


@dataclass(frozen=True)
class LeaseTasks(Ask[tuple[TaskLease, ...]]):
    worker_id: str
    sites: tuple[str, ...] | None = None  # None: every site
    max: int = 1  # 1–100 distinct lanes
    request_id: str | None = None
    wait: bool = False  # park until work appears
    key_id: str | None = None  # the worker key's id: bounds the workers one key creates

    def check(self) -> None:
        check_id("worker_id", self.worker_id)
        check_ids("sites", self.sites)
        check_int("max", self.max, 1, MAX_LEASES)
        check_id("request_id", self.request_id, optional=True)
        check_flag("wait", self.wait)
        check_id("key_id", self.key_id, optional=True)


@dataclass(frozen=True)
class Fenced:
    """The fields of every call made under a lease."""

    task_id: str
    worker_id: str
    lease_token: str

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_id("worker_id", self.worker_id)
        check_text("lease_token", self.lease_token, most=MAX_TOKEN, empty=False)


@dataclass(frozen=True)
class StartTask(Fenced, Ask[Started]):
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)

    def check(self) -> None:
        Fenced.check(self)
        check_ids("sites", self.sites)


@dataclass(frozen=True)
class RenewTask(Fenced, Ask[Renewed]):
    progress: JSONObject | None = None
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)

    def check(self) -> None:
        Fenced.check(self)
        check_json("progress", self.progress, object_only=self.progress is not None)
        check_ids("sites", self.sites)


@dataclass(frozen=True)
class TaskResult(Fenced, Ask[TaskView]):
    outcome: TaskOutcome
    result: JSONValue = None
    error_code: int | None = None
    error_message: str | None = None
    cost: int | None = None
    progress: JSONObject | None = None
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)

    def check(self) -> None:
        Fenced.check(self)
        check_choice("outcome", self.outcome, TaskOutcome)
        check_json("result", self.result)
        check_int("error.code", self.error_code, -INT32 - 1, INT32, optional=True)
        check_text("error.message", self.error_message, optional=True, most=MAX_TEXT)
        check_int("cost", self.cost, 0, MAX_AMOUNT, optional=True)
        check_json("progress", self.progress, object_only=self.progress is not None)
        check_ids("sites", self.sites)


@dataclass(frozen=True)
class SubmitTasks(Batch[SubmitTask, TaskSubmitted]):
    """Up to 100 submits, each idempotent on its own, in one group commit."""

    item = SubmitTask


@dataclass(frozen=True)
class StartTasks(Batch[StartTask, Started]):
    """Up to 100 starts, each fenced on its own (and each still explicit)."""

    item = StartTask


@dataclass(frozen=True)
class TaskResults(Batch[TaskResult, TaskView]):
    """Up to 100 results, each fenced on its own."""

    item = TaskResult


@dataclass(frozen=True)
class ReclaimTask(Ask[TaskView]):
    task_id: str
    action: ReclaimAction
    reason: str
    by: str  # the key (or operator) that did it
    result: JSONValue = None
    cost: int | None = None

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_choice("action", self.action, ReclaimAction)
        check_text("reason", self.reason, most=MAX_TEXT, empty=False)
        check_text("by", self.by, most=MAX_TEXT, empty=False)
        check_json("result", self.result)
        check_int("cost", self.cost, 0, MAX_AMOUNT, optional=True)


@dataclass(frozen=True)
class ReleaseTaskLeases(Tell):
    """Leases handed to a caller that was already gone: back to ``queued``."""

    leases: tuple[tuple[str, str], ...]  # (task_id, lease_token)

    def check(self) -> None:
        check_leases(self.leases)


@dataclass(frozen=True)
class ListWorkers(Ask[Paged[WorkerView]]):
    page: Page = Page()

    def check(self) -> None:
        check_page(self.page)


@dataclass(frozen=True)
class CheckTaskHealth(Ask[TaskHealthReport]):
    """Stale tasks, blocked lanes, unserved sites, queue depth; ``top`` lanes and sites
    listed (0: counts only)."""

    top: int = 0

    def check(self) -> None:
        check_int("top", self.top, 0, MAX_LIMIT)


@dataclass(frozen=True)
class ListSites(Ask[Paged[SiteQueue]]):
    """Sites with queued tasks, most queued first (then by name); ``unserved``: only
    those no online worker serves."""

    page: Page = Page()
    unserved: bool = False

    def check(self) -> None:
        check_page(self.page)
        check_flag("unserved", self.unserved)


@dataclass(frozen=True)
class Upload:
    """An upload the artifact store has staged: its staging name, size and digest."""

    staging_name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class RecordArtifact(Fenced, Ask[ArtifactStored]):
    """A staged upload of the lease holder (leased or running)."""

    name: str
    upload: Upload
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)

    def check(self) -> None:
        Fenced.check(self)
        _check_artifact_name(self.name)
        check_ids("sites", self.sites)


@dataclass(frozen=True)
class ListArtifacts(Ask[ArtifactList]):
    task_id: str
    tenant: str | None = None

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_id("tenant", self.tenant, optional=True)


@dataclass(frozen=True)
class FindArtifact(Ask[ArtifactInfo]):
    """An artifact's record, or ArtifactNotFound (6009)."""

    task_id: str
    name: str
    tenant: str | None = None

    def check(self) -> None:
        check_id("task_id", self.task_id)
        _check_artifact_name(self.name)
        check_id("tenant", self.tenant, optional=True)


@dataclass(frozen=True)
class CountTasks(Ask[tuple[tuple[str, int], ...]]):
    """Unfinished tasks by status, (status, count) in lifecycle order (each status
    counted on its own index: no scan of the finished tasks kept for retention)."""


@dataclass(frozen=True)
class ExistingTasks(Ask[frozenset[str]]):
    """The subset of ``task_ids`` that have a task record (for the orphan sweep)."""

    task_ids: tuple[str, ...]

    def check(self) -> None:
        check_ids("task_ids", self.task_ids, most=10_000, optional=False)


def _check_artifact_name(name: str) -> None:
    if not is_artifact_name(name):
        raise InvalidRequest(f"artifact names are {ARTIFACT_NAME_RULE}")


def release_message(leases: tuple[TaskLease, ...]) -> ReleaseTaskLeases | None:
    """What gives back claims their caller never received (None: nothing to give)."""
    if not leases:
        return None
    return ReleaseTaskLeases(tuple((lease.task_id, lease.lease_token) for lease in leases))



DeviceAction = ControlAction  # what a device's presence does to its tasks


@dataclass(frozen=True)
class ApplyDeviceAction(Ask[int]):
    """What a device's change means for its tasks (sent by the device tracker, or by
    the route that saw the device come back): ``pause`` its batch tasks (away),
    ``resume`` its paused ones (back), ``cancel`` its unfinished ones (gone).
    Idempotent: sent again, it changes nothing more. The reply counts the tasks
    changed (for ``resume``: the paused tasks put back in line)."""

    tenant: str
    device_id: str
    action: DeviceAction

    def check(self) -> None:
        check_id("tenant", self.tenant)
        check_id("device_id", self.device_id)
        check_choice("action", self.action, DeviceAction)
