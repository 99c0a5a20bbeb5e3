"""The task actor's handling of artifacts: recorded under the lease, read by the tenant."""

from __future__ import annotations

import sqlite3
from typing import Any

from leasegate.actors.common import check_site
from leasegate.actors.task_messages import FindArtifact, ListArtifacts, RecordArtifact
from leasegate.artifacts import ArtifactStore
from leasegate.clock import iso
from leasegate.errors import ArtifactNotFound, TaskLeaseInvalid, TaskNotFound, Unavailable
from leasegate.storage import artifacts_sql
from leasegate.storage import tasks_sql as sql


def record(conn: sqlite3.Connection, m: RecordArtifact, now: float,
           store: ArtifactStore | None) -> tuple[dict[str, Any], str | None]:
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
    earlier = artifacts_sql.get(conn, m.task_id, m.name)
    artifacts_sql.put(conn, m.task_id, m.name, m.staged.size, m.staged.sha256, now)
    try:
        store.place(m.staged, m.task_id, m.name)  # last: a failure rolls the row back
    except OSError as exc:
        raise Unavailable(f"could not store the artifact: {exc}") from None
    replaced = earlier["sha256"] if earlier and earlier["sha256"] != m.staged.sha256 else None
    return {"name": m.name, "size": m.staged.size, "sha256": m.staged.sha256}, replaced


def _visible_task(conn: sqlite3.Connection, task_id: str, tenant: str | None) -> None:
    row = sql.get(conn, task_id)
    if row is None or (tenant is not None and row["tenant"] != tenant):
        raise TaskNotFound(f"no task {task_id}")


def render(row: sqlite3.Row) -> dict[str, Any]:
    return {"name": row["name"], "size": row["size"], "sha256": row["sha256"],
            "created_at": iso(row["created_at"])}


def listing(conn: sqlite3.Connection, m: ListArtifacts) -> dict[str, Any]:
    _visible_task(conn, m.task_id, m.tenant)
    return {"items": [render(r) for r in artifacts_sql.of_task(conn, m.task_id)]}


def find(conn: sqlite3.Connection, m: FindArtifact) -> dict[str, Any]:
    _visible_task(conn, m.task_id, m.tenant)
    row = artifacts_sql.get(conn, m.task_id, m.name)
    if row is None:
        raise ArtifactNotFound(f"task {m.task_id} has no artifact {m.name}")
    return render(row)
