"""The task's artifacts, each message followed by its handler: recorded under the
lease, read by the task's tenant."""

from __future__ import annotations

from dataclasses import dataclass

from leasegate.actors.checks import check_id, check_ids
from leasegate.actors.queue.leases import check_site
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.fenced import Fenced
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.actors.tasks.views import ArtifactInfo, ArtifactList, ArtifactStored, artifact_info
from leasegate.errors import (
    ArtifactNotFound,
    InvalidRequest,
    PayloadTooLarge,
    StateConflict,
    TaskLeaseInvalid,
    Unavailable,
)
from leasegate.ids import ARTIFACT_NAME_RULE, is_artifact_name
from leasegate.storage import artifacts_sql


def _check_artifact_name(name: str) -> None:
    if not is_artifact_name(name):
        raise InvalidRequest(f"artifact names are {ARTIFACT_NAME_RULE}")


@dataclass(frozen=True)
class Upload:
    """An upload the artifact store has staged: its staging name, size and digest."""

    staging_name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class RecordArtifact(Fenced[ArtifactStored]):
    """A staged upload of the lease holder (leased or running)."""

    name: str
    upload: Upload
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)

    def check(self) -> None:
        super().check()
        _check_artifact_name(self.name)
        check_ids("sites", self.sites)


@dataclass(frozen=True)
class CheckUpload(Fenced[None]):
    """Whether the lease holder may upload to its task now: asked before the body is
    read, so that an unknown task, a foreign site or a stale token costs no disk.
    :class:`RecordArtifact` checks again (the lease may end while the body arrives)."""

    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)

    def check(self) -> None:
        super().check()
        check_ids("sites", self.sites)


@TASKS.on(CheckUpload)
def check_upload(turn: TaskTurn, m: CheckUpload) -> None:
    _check_lease(turn, m.task_id, m.worker_id, m.lease_token, m.sites)


def _check_lease(turn: TaskTurn, task_id: str, worker_id: str, lease_token: str,
                 sites: tuple[str, ...] | None) -> None:
    """404 for an unknown task, 403 off the key's sites, 6002 unless ``worker_id`` holds
    the task's lease (leased or running) under ``lease_token``."""
    row = turn.visible(task_id, None)
    check_site(row["site"], sites)
    if (row["status"] not in ("leased", "running") or row["lease_owner"] != worker_id
            or row["lease_token"] != lease_token):
        raise TaskLeaseInvalid(
            f"worker {worker_id} does not hold the lease of task {task_id} "
            f"(status {row['status']}); artifacts are uploaded under the lease")


@TASKS.on(RecordArtifact)
def record(turn: TaskTurn, m: RecordArtifact) -> ArtifactStored:
    """Record an upload; a version it replaced is deleted after the commit."""
    conn = turn.conn
    _check_lease(turn, m.task_id, m.worker_id, m.lease_token, m.sites)
    store = turn.artifacts
    if store is None:
        raise Unavailable("artifact storage is not configured")
    upload = m.upload
    _check_room(turn, m)
    earlier = artifacts_sql.get(conn, m.task_id, m.name)
    artifacts_sql.put(conn, m.task_id, m.name, upload.size, upload.sha256, turn.now)
    try:  # last: a failure rolls the row back
        store.place(upload.staging_name, upload.sha256, m.task_id, m.name)
    except OSError as exc:
        raise Unavailable(f"could not store the artifact: {exc}") from None
    if earlier and earlier["sha256"] != upload.sha256:
        replaced = earlier["sha256"]
        turn.after_commit(lambda: store.discard_file_later(m.task_id, m.name, replaced))
    return ArtifactStored(m.name, upload.size, upload.sha256)


def _check_room(turn: TaskTurn, m: RecordArtifact) -> None:
    """Bound what one task keeps: ``max_artifacts_per_task`` names (409, 6003: no
    smaller upload helps) and ``max_artifact_bytes_per_task`` bytes (413). The
    artifact an upload replaces is left out of both."""
    settings = turn.settings
    count, size = artifacts_sql.usage_besides(turn.conn, m.task_id, m.name)
    if count >= settings.max_artifacts_per_task:
        raise StateConflict(
            f"task {m.task_id} already has {count} artifacts, the most a task may have "
            f"(max_artifacts_per_task); upload under one of their names to replace it")
    if size + m.upload.size > settings.max_artifact_bytes_per_task:
        raise PayloadTooLarge(
            f"task {m.task_id}'s artifacts would come to {size + m.upload.size} bytes, over "
            f"the {settings.max_artifact_bytes_per_task} bytes a task may keep "
            f"(max_artifact_bytes_per_task); {size} bytes are taken")


@dataclass(frozen=True)
class ListArtifacts(Ask[Tasks, ArtifactList]):
    task_id: str
    tenant: str | None = None

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_id("tenant", self.tenant, optional=True)


@TASKS.on(ListArtifacts)
def listing(turn: TaskTurn, m: ListArtifacts) -> ArtifactList:
    turn.visible(m.task_id, m.tenant)
    return ArtifactList(tuple(artifact_info(r)
                              for r in artifacts_sql.of_task(turn.conn, m.task_id)))


@dataclass(frozen=True)
class FindArtifact(Ask[Tasks, ArtifactInfo]):
    """An artifact's record, or ArtifactNotFound (6009)."""

    task_id: str
    name: str
    tenant: str | None = None

    def check(self) -> None:
        check_id("task_id", self.task_id)
        _check_artifact_name(self.name)
        check_id("tenant", self.tenant, optional=True)


@TASKS.on(FindArtifact)
def find(turn: TaskTurn, m: FindArtifact) -> ArtifactInfo:
    turn.visible(m.task_id, m.tenant)
    row = artifacts_sql.get(turn.conn, m.task_id, m.name)
    if row is None:
        raise ArtifactNotFound(f"task {m.task_id} has no artifact {m.name}")
    return artifact_info(row)
