"""The console's schedules: the list, one schedule with its fires, and an operator's
pause, resume, trigger and delete (each with why, logged with who did it), as the
``/v1/schedules`` routes do them."""

from __future__ import annotations

import logging

from quart import Response, request, url_for
from werkzeug.wrappers import Response as Redirect

from leasegate.actors.pages import Page
from leasegate.actors.schedules.records import (
    DeleteSchedule,
    GetSchedule,
    ListSchedules,
    PauseSchedule,
)
from leasegate.actors.schedules.submitter import trigger
from leasegate.http.console.blueprint import back_to, bp, form_field, page, principal, session
from leasegate.http.console.pages import PAGE_SIZE, page_offset
from leasegate.http.routes.operator import signed
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json
from leasegate.logs import escape

log = logging.getLogger("leasegate.schedules")


@bp.get("/schedules")
async def schedules() -> Response:
    found = await system().schedules.ask(ListSchedules(Page(limit=PAGE_SIZE,
                                                            offset=page_offset())))
    return await page("schedules.html", found=to_json(found))


@bp.get("/schedules/<schedule_id>")
async def schedule(schedule_id: str) -> Response:
    found = await system().schedules.ask(GetSchedule(schedule_id))
    return await page("schedule.html", s=to_json(found))


@bp.post("/schedules/<schedule_id>/<any(pause, resume, trigger, delete):action>")
async def control_schedule(schedule_id: str, action: str) -> Redirect:
    """Pause, resume, fire now or delete a schedule, with why. A refusal (no reason)
    changes nothing: back (303) to the schedule's page (the form's ``back``), where the
    form shows the error with what was sent, as every console form's refusal does."""
    form = await request.form
    reason = form_field(form, "reason")
    sys = system()
    if action == "trigger":
        await trigger(sys.schedules, sys.jobs, schedule_id, None)
        fire = (await sys.schedules.ask(GetSchedule(schedule_id))).fires[0]
        done = f"fired: {fire.job_id} {fire.status}"
    elif action == "delete":
        await sys.schedules.ask(DeleteSchedule(schedule_id))
        done = "deleted"
    else:
        await sys.schedules.ask(PauseSchedule(schedule_id, None, action == "pause"))
        done = f"{action}d"
    log.info("schedule %s %s by %s: %s", escape(schedule_id), action,
             signed(principal()), escape(reason or ""))
    session().notify("ok", f"schedule {schedule_id}: {done}")
    fallback = (url_for("console.schedules") if action == "delete"
                else url_for("console.schedule", schedule_id=schedule_id))
    return back_to(form if action != "delete" else {}, fallback)
