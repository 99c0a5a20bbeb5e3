"""Operations: keys, workers, backups, health, metrics."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from quart import Blueprint, Response, current_app, request
from quart_schema import validate_querystring, validate_request

from leasegate.actors.keys.records import CreateKey, ListKeys, RevokeKey
from leasegate.actors.keys.views import CreatedKey, KeyView
from leasegate.actors.pages import Page, Paged
from leasegate.actors.queries.reads import CountQueries, ListQuerySites
from leasegate.actors.queries.views import QueryCounts, QuerySite
from leasegate.actors.runtime.periodic import JobStatistics
from leasegate.actors.tasks.presence import CheckTaskHealth, ListSites, ListWorkers
from leasegate.actors.tasks.views import SiteQueue, TaskHealthReport, WorkerView
from leasegate.clock import iso
from leasegate.errors import LeasegateError
from leasegate.http.metrics.collector import Metrics
from leasegate.http.models.jobs import CreateKeyBody, ListArgs, TaskSiteArgs, page
from leasegate.http.models.replies import Health, answers
from leasegate.http.server.auth import Authenticator, allow, require
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json
from leasegate.system import BackupMade

bp = Blueprint("admin", __name__)


def _admin_list(path: str, name: str, doc: str, reply: type[Any],
                ask: Callable[[Page], Awaitable[object]]) -> None:
    """``GET path`` (the view ``name``): an admin's page (``ListArgs``) of what ``ask``
    asks an actor for."""
    async def listing(query_args: ListArgs) -> Any:
        return to_json(await ask(page(query_args)))

    listing.__name__ = listing.__qualname__ = name
    listing.__doc__ = doc
    view = answers(reply)(validate_querystring(ListArgs)(listing))
    bp.get(path)(allow("admin")(view))


@bp.post("/v1/admin/keys")
@allow("admin")
@validate_request(CreateKeyBody)
@answers(CreatedKey, status=201)
async def create_key(data: CreateKeyBody) -> tuple[Any, int]:
    """Create a key; its secret is in this reply only (a hash is stored)."""
    reply = await system().keys.ask(CreateKey(
        data.role, data.name, data.tenant, tuple(data.sites) if data.sites else None))
    return to_json(reply), 201


_admin_list("/v1/admin/keys", "list_keys", "Keys, newest first, without their secrets.",
            Paged[KeyView], lambda asked: system().keys.ask(ListKeys(asked)))


@bp.delete("/v1/admin/keys/<key_id>")
@allow("admin")
@answers(KeyView)
async def revoke_key(key_id: str) -> Any:
    """Revoke a key: it is refused from the next request on, and its waiting long-polls
    and event streams end (on every gateway of the database within a second)."""
    return to_json(await system().keys.ask(RevokeKey(key_id)))


@bp.post("/v1/admin/backup")
@allow("admin")
@answers(BackupMade)
async def make_backup() -> Any:
    """A consistent online copy of the whole database, under ``<data>/backups``."""
    return to_json(await system().backup())


_admin_list("/v1/workers", "list_workers",
            "Workers seen on the task channel: state, last seen, held tasks, sites.",
            Paged[WorkerView], lambda asked: system().tasks.ask(ListWorkers(asked)))


@bp.get("/v1/sites/tasks")
@allow("admin")
@validate_querystring(TaskSiteArgs)
@answers(Paged[SiteQueue])
async def list_task_sites(query_args: TaskSiteArgs) -> Any:
    """Sites with queued tasks, the most queued first (then by name), and whether an
    online worker serves each; ``unserved=true``: only those none serves."""
    return to_json(await system().tasks.ask(
        ListSites(page(query_args), query_args.unserved)))


_admin_list("/v1/sites/queries", "list_query_sites",
            "Sites with queued or leased queries, the most first (then by name).",
            Paged[QuerySite], lambda asked: system().queries.ask(ListQuerySites(asked)))


# Rows of each list in the admin /health details (and the console's overview): the
# ones that matter most; the rest are counted, and paged through on their own routes.
LISTED = 20
SEE_ALL = {"blocked_lanes": "/v1/tasks?status=stale",
           "sites_without_worker": "/v1/sites/tasks?unserved=true",
           "queued_tasks": "/v1/sites/tasks", "queued_queries": "/v1/sites/queries",
           "leased_queries": "/v1/sites/queries"}


async def health_report(detailed: bool) -> dict[str, Any]:
    """Status and counts for anyone; ``details`` (per site, per lane, per job) for an
    admin key only. Both are bounded: the public part holds counts only, the details
    list at most ``LISTED`` lanes or sites each (the longest blocked, the most
    queued), with how many each leaves out, whatever sites or tenants callers create."""
    sys = system()
    writable = await sys.storage_writable()
    top = LISTED if detailed else 0
    tasks = await sys.tasks.ask(CheckTaskHealth(top))
    queries = {count.status: count for count in await sys.queries.ask(CountQueries(top))}
    stats = sys.statistics()
    audit = sys.last_audit
    ledger_ok = audit is None or audit.ok  # None: not audited yet (never after start-up)
    now = sys.clock.now()
    every_job = stats.jobs + stats.services
    failing_jobs = sum(1 for job in every_job if job.last_failure_at is not None
                       and (job.last_run_at is None or job.last_failure_at > job.last_run_at))
    overdue_jobs = sum(1 for job in stats.jobs if job.overdue(now))
    paused = await sys.jobs.sites.paused()
    checks = {
        "storage_writable": writable,
        "stale_tasks": tasks.stale,
        "blocked_lanes": tasks.stale,  # each stale task blocks its lane
        "sites_without_worker": tasks.unserved_sites,
        "queued": {"tasks": tasks.queued, "queries": queries["queued"].n},
        "leased_queries": queries["leased"].n,
        "jobs": len(stats.jobs),
        "failing_jobs": failing_jobs,
        "overdue_jobs": overdue_jobs,
        "draining": stats.draining,
        "paused_sites": len(paused),  # an operator's choice: not degraded
        "ledger_ok": ledger_ok,
        "durable": sys.durable,
    }
    degraded = (not writable or tasks.stale > 0 or tasks.unserved_sites > 0
                or not ledger_ok or overdue_jobs > 0)
    report: dict[str, Any] = {"status": "degraded" if degraded else "ok", "checks": checks}
    if detailed:
        report["details"] = {
            "gateway": sys.gateway,
            "cross_gateway": _cross_gateway(),
            **_listed(tasks, queries),
            "paused_sites": paused[:LISTED],
            "ledger_failing_checks": [] if audit is None else list(audit.failing()),
            "durability_weakened_by": ([] if sys.durability is None
                                       else list(sys.durability.weakened_by)),
            "jobs": {f"{job.owner}.{job.name}": _job(job, now) for job in stats.jobs},
            "on_demand_jobs": {f"{job.owner}.{job.name}": _job(job, now)
                               for job in stats.services},
        }
    return report


def _cross_gateway() -> dict[str, Any] | None:
    """Several gateways on PostgreSQL: whether this one hears the others' notices (its
    long-polls woken by their work, its event stream told of their events); None on
    SQLite."""
    elsewhere = system().elsewhere
    listener = elsewhere.listener
    if listener is None:
        return None
    return {"listening": listener.connected, "connections": listener.connections,
            "notices_heard": elsewhere.notices}


def _listed(tasks: TaskHealthReport, queries: dict[str, QueryCounts]) -> dict[str, Any]:
    """The details' lists (at most ``LISTED`` each), how many each leaves out, and the
    routes that page through all of them."""
    queued, leased = queries["queued"], queries["leased"]
    return {
        "blocked_lanes": to_json(tasks.blocked_lanes),
        "sites_without_worker": [site.site for site in tasks.unserved],
        "queued": {"tasks": {site.site: site.queued for site in tasks.busiest},
                   "queries": queued.by_site},
        "leased_queries": leased.by_site,
        "unlisted": {
            "blocked_lanes": tasks.stale - len(tasks.blocked_lanes),
            "sites_without_worker": tasks.unserved_sites - len(tasks.unserved),
            "queued_tasks": tasks.queued_sites - len(tasks.busiest),
            "queued_queries": queued.sites - len(queued.by_site),
            "leased_queries": leased.sites - len(leased.by_site),
        },
        "see_all": SEE_ALL,
    }


def _job(job: JobStatistics, now: float) -> dict[str, Any]:
    periodic = math.isfinite(job.every)
    return {"every": job.every if periodic else None, "runs": job.runs,
            "failures": job.failures, "last_run_at": iso(job.last_run_at),
            "last_run_by": job.last_run_by,
            "last_failure_at": iso(job.last_failure_at),
            "next_run_at": iso(job.next_run_at) if periodic else None,
            "overdue": job.overdue(now)}


@bp.get("/health")
@answers(Health)
async def health() -> dict[str, Any]:
    """No key needed: ``ok`` or ``degraded`` (storage failing, a task stale, a site
    without a worker, the ledger audit failing, a periodic job that has not run for
    three of its intervals) and counts. With an admin key, also ``details``: which lanes are
    blocked by which task since when, which sites have no worker, queue depths by
    site, every periodic job. Any other key, or a key that is wrong, unknown or
    rate-limited, gets the public view: /health refuses no one."""
    detailed = False
    if request.headers.get("Authorization"):
        authenticator: Authenticator = current_app.extensions["leasegate.auth"]
        try:
            detailed = (await authenticator.authenticate()).role == "admin"
        except LeasegateError:
            detailed = False
    return await health_report(detailed)


@bp.get("/metrics")
async def metrics() -> Response:
    """Prometheus text format (admin key unless ``metrics_public``)."""
    sys = system()
    if not sys.settings.metrics_public:
        require("admin")
    collector: Metrics = current_app.extensions["leasegate.metrics"]
    authenticator: Authenticator = current_app.extensions["leasegate.auth"]
    collector.rate_limit_buckets = {"key": authenticator.limiter.size,
                                    "address": authenticator.address_limiter.size}
    collector.holds = (current_app.extensions["leasegate.waiting_polls"],
                       current_app.extensions.get("leasegate.connections"))
    await collector.refresh(sys)
    return Response(generate_latest(collector.registry), content_type=CONTENT_TYPE_LATEST)
