"""The task actor's handling of artifacts: recorded under the lease, read by the tenant."""

from __future__ import annotations

import sqlite3

from leasegate.actors.leases import check_site
from leasegate.actors.task_messages import FindArtifact, ListArtifacts, RecordArtifact
from leasegate.actors.task_views import ArtifactInfo, ArtifactList, ArtifactStored, artifact_info
from leasegate.errors import (
    ArtifactNotFound,
    PayloadTooLarge,
    StateConflict,
    TaskLeaseInvalid,
    TaskNotFound,
    Unavailable,
)
from leasegate.settings import Settings
from leasegate.storage import artifacts_sql
from leasegate.storage import tasks_sql as sql
from leasegate.storage.artifacts import ArtifactStore


def record(conn: sqlite3.Connection, m: RecordArtifact, now: float, store: ArtifactStore | None,
           settings: Settings) -> tuple[ArtifactStored, str | None]:
    """Record an upload; returns the reply and the sha256 of a version it replaced."""
    row = sql.get(conn, m.task_id)
    if row is None:
        raise TaskNotFound(f"no task {m.task_id}")
    check_site(row["site"], m.sites)
    if (row["status"] not in ("leased", "running") or row["lease_owner"] != m.worker_id
            or row["lease_token"] != m.lease_token):
        raise TaskLeaseInvalid(
            f"worker {m.worker_id} does not hold the lease of task {m.task_id} "
            f"(status {row['status']}); artifacts are uploaded under the lease")
    if store is None:
        raise Unavailable("artifact storage is not configured")
    upload = m.upload
    _check_room(conn, m, settings)
    earlier = artifacts_sql.get(conn, m.task_id, m.name)
    artifacts_sql.put(conn, m.task_id, m.name, upload.size, upload.sha256, now)
    try:  # last: a failure rolls the row back
        store.place(upload.staging_name, upload.sha256, m.task_id, m.name)
    except OSError as exc:
        raise Unavailable(f"could not store the artifact: {exc}") from None
    replaced = earlier["sha256"] if earlier and earlier["sha256"] != upload.sha256 else None
    return ArtifactStored(m.name, upload.size, upload.sha256), replaced


def _check_room(conn: sqlite3.Connection, m: RecordArtifact, settings: Settings) -> None:
    """Bound what one task keeps: ``max_artifacts_per_task`` names (409, 6003: no
    smaller upload helps) and ``max_artifact_bytes_per_task`` bytes (413). The
    artifact an upload replaces is left out of both."""
    count, size = artifacts_sql.usage_besides(conn, m.task_id, m.name)
    if count >= settings.max_artifacts_per_task:
        raise StateConflict(
            f"task {m.task_id} already has {count} artifacts, the most a task may have "
            f"(max_artifacts_per_task); upload under one of their names to replace it")
    if size + m.upload.size > settings.max_artifact_bytes_per_task:
        raise PayloadTooLarge(
            f"task {m.task_id}'s artifacts would come to {size + m.upload.size} bytes, over "
            f"the {settings.max_artifact_bytes_per_task} bytes a task may keep "
            f"(max_artifact_bytes_per_task); {size} bytes are taken")


def _visible_task(conn: sqlite3.Connection, task_id: str, tenant: str | None) -> None:
    row = sql.get(conn, task_id)
    if row is None or (tenant is not None and row["tenant"] != tenant):
        raise TaskNotFound(f"no task {task_id}")


def listing(conn: sqlite3.Connection, m: ListArtifacts) -> ArtifactList:
    _visible_task(conn, m.task_id, m.tenant)
    return ArtifactList(tuple(artifact_info(r) for r in artifacts_sql.of_task(conn, m.task_id)))


def find(conn: sqlite3.Connection, m: FindArtifact) -> ArtifactInfo:
    _visible_task(conn, m.task_id, m.tenant)
    row = artifacts_sql.get(conn, m.task_id, m.name)
    if row is None:
        raise ArtifactNotFound(f"task {m.task_id} has no artifact {m.name}")
    return artifact_info(row)
