"""Operations: keys, workers, health, metrics (API.md "Operations")."""

from __future__ import annotations

import time
from typing import Any

import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from quart import Blueprint, Response, current_app, request
from quart_schema import document_response, validate_querystring, validate_request

from leasegate.actors.keys import CreateKey, ListKeys, RevokeKey
from leasegate.actors.queries import QueryStats
from leasegate.actors.task_messages import ListWorkers, TaskHealth
from leasegate.clock import iso
from leasegate.http.auth import Authenticator, require
from leasegate.http.common import page, system
from leasegate.http.metrics import Metrics
from leasegate.http.models import (
    BackupMade,
    CreatedKey,
    CreateKeyBody,
    Health,
    KeyObject,
    KeyPage,
    ListArgs,
    WorkerPage,
)
from leasegate.storage.backup import backup

bp = Blueprint("admin", __name__)


@bp.post("/v1/admin/keys")
@validate_request(CreateKeyBody)
@document_response(CreatedKey, 201)
async def create_key(data: CreateKeyBody) -> tuple[dict[str, Any], int]:
    """Create a key; its secret is in this reply only (a hash is stored)."""
    require("admin")
    reply = await system().keys.mailbox.ask(CreateKey(
        data.role, data.name, data.tenant, tuple(data.sites) if data.sites else None))
    return reply, 201


@bp.get("/v1/admin/keys")
@validate_querystring(ListArgs)
@document_response(KeyPage)
async def list_keys(query_args: ListArgs) -> dict[str, Any]:
    """Keys, newest first, without their secrets."""
    require("admin")
    reply: dict[str, Any] = await system().keys.mailbox.ask(ListKeys(page(query_args)))
    return reply


@bp.delete("/v1/admin/keys/<key_id>")
@document_response(KeyObject)
async def revoke_key(key_id: str) -> dict[str, Any]:
    """Revoke a key; it is refused from the next request on."""
    require("admin")
    reply: dict[str, Any] = await system().keys.mailbox.ask(RevokeKey(key_id))
    authenticator: Authenticator = current_app.extensions["leasegate.auth"]
    authenticator.forget(key_id)
    return reply


@bp.post("/v1/admin/backup")
@document_response(BackupMade)
async def make_backup() -> dict[str, Any]:
    """A consistent online copy of the whole database, under ``<data>/backups``."""
    require("admin")
    sys = system()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(sys.clock.now()))
    out = sys.db_path.parent / "backups" / f"leasegate-{stamp}.db"
    size = await trio.to_thread.run_sync(backup, sys.db_path, out)
    return {"path": str(out), "bytes": size}


@bp.get("/v1/workers")
@validate_querystring(ListArgs)
@document_response(WorkerPage)
async def list_workers(query_args: ListArgs) -> dict[str, Any]:
    """Workers seen on the task channel: state, last seen, held tasks, sites."""
    require("admin")
    reply: dict[str, Any] = await system().tasks.mailbox.ask(ListWorkers(page(query_args)))
    return reply


async def health_report(detailed: bool) -> dict[str, Any]:
    sys = system()
    writable = await sys.storage_writable()
    tasks = await sys.tasks.mailbox.ask(TaskHealth())
    query_counts: dict[str, dict[str, int]] = {}
    for row in await sys.queries.mailbox.ask(QueryStats()):
        query_counts.setdefault(row["status"], {})[row["site"]] = row["n"]
    jobs = {
        f"{owner}.{job.name}": {"runs": job.runs, "failures": job.failures,
                                "last_run_at": iso(job.last_run_at),
                                "next_run_at": iso(job.next_at) if job.next_at else None}
        for owner, job in sys.jobs()
    }
    lanes = tasks["blocked_lanes"]
    if not detailed:  # accounts and task ids are the tenants' business
        lanes = [{"site": lane["site"], "since": lane["since"]} for lane in lanes]
    checks = {
        "storage_writable": writable,
        "stale_tasks": tasks["stale"],
        "blocked_lanes": lanes,
        "sites_without_worker": tasks["unserved_sites"],
        "queued": {"tasks": tasks["queued"], "queries": query_counts.get("queued", {})},
        "leased_queries": query_counts.get("leased", {}),
        "jobs": jobs,
        "draining": any(a.draining for a in sys.actors),
    }
    degraded = not writable or tasks["stale"] > 0 or bool(tasks["unserved_sites"])
    return {"status": "degraded" if degraded else "ok", "checks": checks}


@bp.get("/health")
@document_response(Health)
async def health() -> dict[str, Any]:
    """No key needed. ``degraded`` while storage fails, a task is stale or a site has no
    worker. Blocked lanes name their account, task and since when for an admin key;
    without one, only their site and since when."""
    detailed = False
    if request.headers.get("Authorization"):
        authenticator: Authenticator = current_app.extensions["leasegate.auth"]
        detailed = (await authenticator.authenticate()).role == "admin"
    return await health_report(detailed)


@bp.get("/metrics")
async def metrics() -> Response:
    """Prometheus text format (admin key unless ``metrics_public``)."""
    if not system().settings.metrics_public:
        require("admin")
    collector: Metrics = current_app.extensions["leasegate.metrics"]
    await collector.refresh(system())
    return Response(generate_latest(collector.registry), content_type=CONTENT_TYPE_LATEST)
