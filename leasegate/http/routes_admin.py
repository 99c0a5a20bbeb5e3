"""Operations: keys, workers, backups, health, metrics."""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from quart import Blueprint, Response, current_app, request
from quart_schema import document_response, validate_querystring, validate_request

from leasegate.actors.key_messages import CreateKey, ListKeys, RevokeKey
from leasegate.actors.query_messages import CountQueries
from leasegate.actors.task_messages import CheckTaskHealth, ListWorkers
from leasegate.clock import iso
from leasegate.errors import RateLimited, Unauthorized
from leasegate.http.auth import Authenticator, allow, require
from leasegate.http.context import system
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
    page,
)
from leasegate.http.render import to_json

bp = Blueprint("admin", __name__)


@bp.post("/v1/admin/keys")
@allow("admin")
@validate_request(CreateKeyBody)
@document_response(CreatedKey, 201)
async def create_key(data: CreateKeyBody) -> tuple[Any, int]:
    """Create a key; its secret is in this reply only (a hash is stored)."""
    reply = await system().keys.mailbox.ask(CreateKey(
        data.role, data.name, data.tenant, tuple(data.sites) if data.sites else None))
    return to_json(reply), 201


@bp.get("/v1/admin/keys")
@allow("admin")
@validate_querystring(ListArgs)
@document_response(KeyPage)
async def list_keys(query_args: ListArgs) -> Any:
    """Keys, newest first, without their secrets."""
    return to_json(await system().keys.mailbox.ask(ListKeys(page(query_args))))


@bp.delete("/v1/admin/keys/<key_id>")
@allow("admin")
@document_response(KeyObject)
async def revoke_key(key_id: str) -> Any:
    """Revoke a key; it is refused from the next request on."""
    reply = await system().keys.mailbox.ask(RevokeKey(key_id))
    authenticator: Authenticator = current_app.extensions["leasegate.auth"]
    authenticator.forget(key_id)
    return to_json(reply)


@bp.post("/v1/admin/backup")
@allow("admin")
@document_response(BackupMade)
async def make_backup() -> Any:
    """A consistent online copy of the whole database, under ``<data>/backups``."""
    return to_json(await system().backup())


@bp.get("/v1/workers")
@allow("admin")
@validate_querystring(ListArgs)
@document_response(WorkerPage)
async def list_workers(query_args: ListArgs) -> Any:
    """Workers seen on the task channel: state, last seen, held tasks, sites."""
    return to_json(await system().tasks.mailbox.ask(ListWorkers(page(query_args))))


async def health_report(detailed: bool) -> dict[str, Any]:
    sys = system()
    writable = await sys.storage_writable()
    tasks = await sys.tasks.mailbox.ask(CheckTaskHealth())
    query_counts: dict[str, dict[str, int]] = {}
    for row in await sys.queries.mailbox.ask(CountQueries()):
        query_counts.setdefault(row.status, {})[row.site] = row.n
    stats = sys.statistics()
    jobs = {
        f"{job.owner}.{job.name}": {"runs": job.runs, "failures": job.failures,
                                    "last_run_at": iso(job.last_run_at),
                                    "next_run_at": iso(job.next_run_at)}
        for job in stats.jobs
    }
    lanes: list[dict[str, Any]] = to_json(tasks.blocked_lanes)
    if not detailed:  # accounts and task ids are the tenants' business
        lanes = [{"site": lane["site"], "since": lane["since"]} for lane in lanes]
    checks = {
        "storage_writable": writable,
        "stale_tasks": tasks.stale,
        "blocked_lanes": lanes,
        "sites_without_worker": list(tasks.unserved_sites),
        "queued": {"tasks": tasks.queued, "queries": query_counts.get("queued", {})},
        "leased_queries": query_counts.get("leased", {}),
        "jobs": jobs,
        "draining": stats.draining,
    }
    degraded = not writable or tasks.stale > 0 or bool(tasks.unserved_sites)
    return {"status": "degraded" if degraded else "ok", "checks": checks}


@bp.get("/health")
@document_response(Health)
async def health() -> dict[str, Any]:
    """No key needed. ``degraded`` while storage fails, a task is stale or a site has no
    worker. Blocked lanes name their account, task and since when for an admin key;
    without one (or with a bad one: never refused), only their site and since when."""
    detailed = False
    if request.headers.get("Authorization"):
        authenticator: Authenticator = current_app.extensions["leasegate.auth"]
        # No key is needed here: a bad or throttled one gets the public answer.
        with contextlib.suppress(Unauthorized, RateLimited):
            detailed = (await authenticator.authenticate()).role == "admin"
    return await health_report(detailed)


@bp.get("/metrics")
async def metrics() -> Response:
    """Prometheus text format (admin key unless ``metrics_public``)."""
    sys = system()
    if not sys.settings.metrics_public:
        require("admin")
    collector: Metrics = current_app.extensions["leasegate.metrics"]
    await collector.refresh(sys)
    return Response(generate_latest(collector.registry), content_type=CONTENT_TYPE_LATEST)
