"""Routes of recurring schedules: a client key manages its own tenant's, an admin
key anyone's (naming the tenant when it creates one)."""

from __future__ import annotations

import logging
from typing import Any

from quart import Blueprint
from quart_schema import validate_querystring, validate_request

from leasegate.actors.pages import Paged
from leasegate.actors.schedules.records import (
    DeleteSchedule,
    GetSchedule,
    ListSchedules,
    PauseSchedule,
    PutSchedule,
)
from leasegate.actors.schedules.submitter import trigger
from leasegate.actors.schedules.views import ScheduleView
from leasegate.errors import Forbidden
from leasegate.http.models.jobs import page
from leasegate.http.models.operator import CancelBody
from leasegate.http.models.payloads import check_json_field
from leasegate.http.models.replies import answers
from leasegate.http.models.schedules import PutScheduleBody, ScheduleListArgs
from leasegate.http.openapi.document import optional_body
from leasegate.http.routes.operator import optional_reason, signed
from leasegate.http.server.auth import allow, require_tenant
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json
from leasegate.logs import escape

log = logging.getLogger("leasegate.schedules")
bp = Blueprint("schedules", __name__)


def owner(asked: str | None) -> str:
    """The tenant a new schedule is for: a client key's own; an admin names it."""
    _, tenant = require_tenant("client")
    if tenant is None:
        if asked is None:  # as an admin's submit: no tenant of its own to own the jobs
            raise Forbidden("tenant is required: an admin key creates a schedule for the "
                            "tenant it names")
        return asked
    if asked is not None and asked != tenant:
        raise Forbidden(f"a client key manages its own tenant's schedules ({tenant})")
    return tenant


@bp.put("/v1/schedules/<schedule_id>")
@allow("client")
@validate_request(PutScheduleBody)
@answers(ScheduleView, status=201)
@answers(ScheduleView, 409, status=200)
async def put_schedule(schedule_id: str, data: PutScheduleBody) -> tuple[Any, int]:
    """Create (201) or replace (200) a recurring schedule. Bad cron, time zone or
    template: 400; more than ``max_schedules_per_tenant``: 409; an id another tenant
    holds: 409."""
    tenant = owner(data.tenant)
    check_json_field("params", data.template.get("params", {}))  # 413 past its limit
    put = await system().schedules.ask(PutSchedule(
        tenant, schedule_id, data.cron, data.channel, data.template, data.timezone,
        data.overlap, data.catch_up, data.paused))
    return to_json(put.schedule), 201 if put.created else 200


@bp.get("/v1/schedules")
@allow("client")
@validate_querystring(ScheduleListArgs)
@answers(Paged[ScheduleView])
async def list_schedules(query_args: ScheduleListArgs) -> Any:
    """Schedules, newest first: a client's tenant's; an admin's, anyone's (or
    ``tenant``'s)."""
    _, tenant = require_tenant("client")
    if tenant is not None and query_args.tenant not in (None, tenant):
        raise Forbidden(f"a client key reads its own tenant's schedules ({tenant})")
    return to_json(await system().schedules.ask(ListSchedules(
        page(query_args), tenant or query_args.tenant)))


@bp.get("/v1/schedules/<schedule_id>")
@allow("client")
@answers(ScheduleView)
async def get_schedule(schedule_id: str) -> Any:
    """A schedule: its next fire time and its last 20 fires, each with its job id
    and outcome."""
    _, tenant = require_tenant("client")
    return to_json(await system().schedules.ask(GetSchedule(schedule_id, tenant)))


@bp.delete("/v1/schedules/<schedule_id>")
@allow("client")
@answers(None, 404)
async def delete_schedule(schedule_id: str) -> tuple[str, int]:
    """Delete a schedule and its fires (the jobs they made stay)."""
    principal, tenant = require_tenant("client")
    await system().schedules.ask(DeleteSchedule(schedule_id, tenant))
    log.info("schedule %s deleted by %s", escape(schedule_id), signed(principal))
    return "", 204


def _pause_route(action: str, paused: bool, doc: str) -> None:
    async def control(schedule_id: str) -> Any:
        principal, tenant = require_tenant("client")
        reason = await optional_reason()
        view = await system().schedules.ask(PauseSchedule(schedule_id, tenant, paused))
        log.info("schedule %s %sd by %s: %s", escape(schedule_id), action, signed(principal),
                 escape(reason or "no reason given"))
        return to_json(view)

    control.__name__ = f"{action}_schedule"
    control.__doc__ = doc
    bp.post(f"/v1/schedules/<schedule_id>/{action}")(
        allow("client")(answers(ScheduleView)(optional_body(CancelBody)(control))))


_pause_route("pause", True, "Pause a schedule: no fires until it is resumed. Body: "
                            "optional `{reason}`.")
_pause_route("resume", False, "Resume a schedule: it fires from its next cron time "
                              "(the times it was paused are not caught up).")


@bp.post("/v1/schedules/<schedule_id>/trigger")
@allow("client")
@answers(ScheduleView)
@optional_body(CancelBody)
async def trigger_schedule(schedule_id: str) -> Any:
    """Fire now, paused or not and whatever its overlap: the job
    ``<schedule_id>@<now>``; answers the schedule with the fire's outcome. Body:
    optional `{reason}`."""
    principal, tenant = require_tenant("client")
    reason = await optional_reason()
    sys = system()
    await trigger(sys.schedules, sys.jobs, schedule_id, tenant)
    log.info("schedule %s triggered by %s: %s", escape(schedule_id), signed(principal),
             escape(reason or "no reason given"))
    return to_json(await sys.schedules.ask(GetSchedule(schedule_id, tenant)))
