"""An operator's actions (admin): retry and redrive jobs, pause, resume and throttle
sites. Each says who did it (the admin key's name and id) and, where it changes a
job, why."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError
from quart import Blueprint, request
from quart_schema import validate_querystring, validate_request

from leasegate.actors.jobs.operator import OperatorActions, Redriven, reclaim_stale
from leasegate.actors.jobs.sites import SiteState
from leasegate.actors.keys.views import Principal
from leasegate.actors.pages import Paged
from leasegate.actors.queries.views import QueryView
from leasegate.actors.queue.retry import Redrive
from leasegate.actors.tasks.control import FindStaleTasks, StaleReclaimed
from leasegate.actors.tasks.operator import SiteAction
from leasegate.actors.tasks.views import TaskView
from leasegate.errors import InvalidRequest
from leasegate.http.models.jobs import ListArgs, page
from leasegate.http.models.operator import (
    BulkReclaimBody,
    CancelBody,
    QueryRedriveBody,
    ReasonBody,
    RedriveBody,
    ThrottleBody,
)
from leasegate.http.models.replies import answers
from leasegate.http.server.auth import allow, require
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json

bp = Blueprint("operator", __name__)


def signed(principal: Principal) -> str:
    """Who did an action: the key's name and id, as the history records it (one
    spelling for the API's routes and the console's forms)."""
    return f"{principal.name} ({principal.key_id})"


def operator() -> str:
    """Who: the admin key, signed."""
    return signed(require("admin"))


async def optional_reason() -> str | None:
    """The ``{"reason"}`` a cancel, pause or resume may carry (an empty body or
    ``null``: none; the views are marked ``optional_body(CancelBody)`` for the
    document)."""
    body = (await request.get_data(as_text=False)).strip()
    if body in (b"", b"null"):
        return None
    try:
        return CancelBody.model_validate_json(body).reason
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise InvalidRequest(f"{where}: {first['msg']}") from None


def _actions(channel: str) -> OperatorActions[Any, Any]:
    jobs = system().jobs
    return jobs.task_actions if channel == "tasks" else jobs.query_actions


@bp.post("/v1/tasks/<task_id>/retry")
@allow("admin")
@validate_request(ReasonBody)
@answers(TaskView, 402, 409)
async def retry_task(task_id: str, data: ReasonBody) -> Any:
    """A failed, expired or canceled task back to ``queued`` as a new attempt (its
    history kept; a billed task's hold placed again, 402 if short). Other states: 409."""
    by = operator()
    return to_json(await _actions("tasks").retry(task_id, reason=data.reason, by=by))


@bp.post("/v1/queries/<query_id>/retry")
@allow("admin")
@validate_request(ReasonBody)
@answers(QueryView, 402, 409)
async def retry_query(query_id: str, data: ReasonBody) -> Any:
    """A failed or expired query back to ``queued``, its attempts counted afresh."""
    by = operator()
    return to_json(await _actions("queries").retry(query_id, reason=data.reason, by=by))


def _ended(when: datetime | None) -> float | None:
    """A redrive's or bulk reclaim's ``since`` or ``until`` as wall seconds. No job ended
    (or went stale) before 1970, so an earlier date-time (which the document allows)
    selects as 1970 does."""
    return None if when is None else max(0.0, when.timestamp())


def _redrive_route(channel: str, body: type[RedriveBody]) -> None:
    async def redrive(data: RedriveBody) -> Any:
        by = operator()
        selection = Redrive(data.status, data.site, data.kind, data.tenant,
                            _ended(data.since), _ended(data.until), data.limit)
        return to_json(await _actions(channel).redrive(selection, reason=data.reason, by=by,
                                                       dry_run=data.dry_run))

    noun = channel[:-1] if channel == "tasks" else "query"
    redrive.__name__ = f"redrive_{channel}"
    redrive.__doc__ = (f"Retry every {noun} of ``status`` that the filters match (the "
                       "oldest ``limit``); ``dry_run``: count them only.")
    view = answers(Redriven)(validate_request(body)(redrive))
    bp.post(f"/v1/{channel}/redrive")(allow("admin")(view))


_redrive_route("tasks", RedriveBody)
_redrive_route("queries", QueryRedriveBody)


@bp.post("/v1/tasks/reclaim")
@allow("admin")
@validate_request(BulkReclaimBody)
@answers(StaleReclaimed)
async def reclaim_tasks(data: BulkReclaimBody) -> Any:
    """Resolve every stale task the filters match (the first ``limit`` to have gone
    stale) with one outcome: requeue, succeeded or failed, with a reason; ``dry_run``:
    count them only. Each is reclaimed on its own, as one reclaim would be: a task that
    is no longer stale is skipped."""
    return to_json(await reclaim_stale(system().jobs.tasks.queue, FindStaleTasks(
        data.site, data.account, _ended(data.since), _ended(data.until), data.limit),
        data.action, data.reason, by=operator(), dry_run=data.dry_run))


@bp.get("/v1/sites")
@allow("admin")
@validate_querystring(ListArgs)
@answers(Paged[SiteState])
async def list_sites(query_args: ListArgs) -> Any:
    """Every paused or throttled site and those with queued work (the 500 busiest of
    each channel), by name: controls and queued counts."""
    return to_json(await system().jobs.sites.page(page(query_args)))


def _site_route(action: SiteAction, doc: str) -> None:
    async def control(site: str, data: ReasonBody) -> Any:
        by = operator()
        return to_json(await system().jobs.sites.set(site, action, by=by, reason=data.reason))

    control.__name__ = f"{action}_site"
    control.__doc__ = doc
    view = answers(SiteState)(validate_request(ReasonBody)(control))
    bp.post(f"/v1/sites/<site>/{action}")(allow("admin")(view))


_site_route("pause", "Pause a site: nothing of it is leased, on either channel; submits "
                     "still queue. Kept in the database.")
_site_route("resume", "Resume a paused site: its work is leased again.")


@bp.put("/v1/sites/<site>/throttle")
@allow("admin")
@validate_request(ThrottleBody)
@answers(SiteState)
async def throttle_site(site: str, data: ThrottleBody) -> Any:
    """At most ``leases_per_second`` leases a second of the site's jobs, tasks and
    queries together, whichever workers and gateways ask (null lifts it). Kept in the
    database, bucket included."""
    by = operator()
    rate = None if data.leases_per_second is None else float(data.leases_per_second)
    return to_json(await system().jobs.sites.set(site, "throttle", by=by,
                                                 leases_per_second=rate))
