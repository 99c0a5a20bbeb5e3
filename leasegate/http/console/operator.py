"""The console's operator actions (POST forms, and the bulk retry's page): cancel,
resume and retry one job, redrive with a preview and a confirmation, pause, resume
and throttle a site. Each sends what its ``/v1`` route sends, with the signed-in key
as who did it; success redirects (303) back with a notice, a refusal is the error
page with the domain error's status."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, get_args

from quart import Response, redirect, request, url_for
from werkzeug.wrappers import Response as Redirect

from leasegate.actors.jobs.operator import OperatorActions
from leasegate.actors.jobs.operator import reclaim_stale as bulk_reclaim
from leasegate.actors.queue.retry import Redrive
from leasegate.actors.tasks.control import ControlTask, FindStaleTasks, ReclaimAction
from leasegate.errors import InvalidRequest
from leasegate.http.console.blueprint import back_to, bp, form_field, page, principal, session
from leasegate.http.console.search import utc_text
from leasegate.http.models.numbers import whole_number
from leasegate.http.routes.operator import signed
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json
from leasegate.ids import ID_RULE, is_id

CHANNELS = {"task": ("tasks", ("failed", "expired", "canceled")),
            "query": ("queries", ("failed", "expired"))}


def _by() -> str:
    return signed(principal())


def _actions(channel: str) -> OperatorActions[Any, Any]:
    jobs = system().jobs
    return jobs.task_actions if channel == "task" else jobs.query_actions


def _job_page(channel: str, job_id: str) -> str:
    if channel == "task":
        return url_for("console.task", task_id=job_id)
    return url_for("console.query", query_id=job_id)


@bp.post("/tasks/<task_id>/<any(cancel, resume):action>")
async def control_task(task_id: str, action: str) -> Redirect:
    """Cancel (queued, leased, paused; running: asked to stop) or resume (paused) a
    task, with why."""
    form = await request.form
    before = (await system().jobs.tasks.get(task_id, None)).status
    done = await system().jobs.tasks.ask(ControlTask(
        task_id, "cancel" if action == "cancel" else "resume", None, by=_by(),
        reason=form_field(form, "reason")))
    asked = " (the worker is asked to stop)" if done.cancel_requested and action == "cancel" \
        else ""
    session().notify("ok", f"task {task_id}: {before} → {done.status}{asked}")
    return back_to(form, url_for("console.task", task_id=task_id))


@bp.post("/<any(tasks, queries):plural>/<job_id>/retry")
async def retry_job(plural: str, job_id: str) -> Redirect:
    """A failed, expired (or canceled task) back in line as a new attempt, with why."""
    form = await request.form
    channel = "task" if plural == "tasks" else "query"
    done = await _actions(channel).retry(job_id, reason=form_field(form, "reason") or "",
                                         by=_by())
    session().notify("ok", f"{channel} {job_id}: retried, {done.status} (attempt "
                           f"{done.attempts + 1} next)")
    return back_to(form, _job_page(channel, job_id))


# ---- redrive: a form, a preview with a confirmation, the run -------------------------

def _channel(value: str | None) -> str:
    if value not in CHANNELS:
        raise InvalidRequest("channel must be task or query")
    return value


@bp.get("/redrive")
async def redrive_form() -> Response:
    channel = _channel(request.args.get("channel", "task"))
    return await page("redrive.html", channel=channel, statuses=CHANNELS[channel][1],
                      fields={name: request.args.get(name, "") for name in (
                          "status", "site", "kind", "tenant", "since", "until", "limit",
                          "reason")}, preview=None)


def _when(form: Any, name: str) -> float | None:
    text = form_field(form, name, required=False)
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(utc_text(text).replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(f"{name} must be a date-time such as 2026-12-01 08:00:00 UTC") \
            from None
    if when.tzinfo is None:
        raise InvalidRequest(f"{name} needs its offset (Z for UTC)")
    return when.timestamp()


def _selection(form: Any, channel: str) -> Redrive:
    status = form_field(form, "status") or ""
    if status not in CHANNELS[channel][1]:
        raise InvalidRequest(f"status must be one of {', '.join(CHANNELS[channel][1])}")
    filters: dict[str, str | None] = {}
    for name in ("site", "kind", "tenant"):
        value = form_field(form, name, required=False)
        if value is not None and not is_id(value):
            raise InvalidRequest(f"{name} must be {ID_RULE}")
        filters[name] = value
    return Redrive(status, filters["site"], filters["kind"], filters["tenant"],
                   _when(form, "since"), _when(form, "until"), _limit(form))


def _limit(form: Any) -> int:
    limit_text = form_field(form, "limit", required=False)
    limit = 1000 if limit_text is None else whole_number(limit_text, 10_000)
    if limit is None or limit < 1:
        raise InvalidRequest("limit must be a whole number 1-10000")
    return limit


@bp.post("/redrive")
async def redrive() -> Response | Redirect:
    """Without ``confirm``: a dry run, shown as a preview with the button that runs it;
    with it: the retries, and a notice of how many."""
    form = await request.form
    channel = _channel(form.get("channel"))
    selection = _selection(form, channel)
    reason = form_field(form, "reason") or ""
    actions = _actions(channel)
    if form.get("confirm") != "yes":
        preview = await actions.redrive(selection, reason=reason, by=_by(), dry_run=True)
        return await page("redrive.html", channel=channel, statuses=CHANNELS[channel][1],
                          fields={k: str(form.get(k, "")) for k in (
                              "status", "site", "kind", "tenant", "since", "until",
                              "limit", "reason")},
                          preview=to_json(preview), will=min(preview.matched,
                                                              selection.limit))
    done = await actions.redrive(selection, reason=reason, by=_by(), dry_run=False)
    plural = CHANNELS[channel][0]
    session().notify("ok", f"redrive: {done.requeued} of {done.matched} {selection.status} "
                           f"{plural} requeued")
    return back_to(form, url_for(f"console.{plural}", status="queued"))


# ---- bulk reclaim: the same steps as redrive ------------------------------------------

BULK_RECLAIM_FIELDS = ("site", "account", "since", "until", "limit", "action", "reason")


def _stale_selection(form: Any) -> FindStaleTasks:
    filters = {}
    for name in ("site", "account"):
        value = form_field(form, name, required=False)
        if value is not None and not is_id(value):
            raise InvalidRequest(f"{name} must be {ID_RULE}")
        filters[name] = value
    return FindStaleTasks(filters["site"], filters["account"], _when(form, "since"),
                          _when(form, "until"), _limit(form))


@bp.get("/reclaim")
async def reclaim_stale_form() -> Response:
    return await page("reclaim.html", preview=None, fields={
        name: request.args.get(name, "") for name in BULK_RECLAIM_FIELDS})


@bp.post("/reclaim")
async def reclaim_stale() -> Response | Redirect:
    """Every stale task the selection matches resolved with one outcome and reason:
    without ``confirm`` a dry run, shown as a preview with the button that runs it."""
    form = await request.form
    selection = _stale_selection(form)
    action = form_field(form, "action") or ""
    if action not in get_args(ReclaimAction):
        raise InvalidRequest("choose the outcome: requeue, succeeded or failed")
    reason = form_field(form, "reason") or ""
    confirmed = form.get("confirm") == "yes"
    done = await bulk_reclaim(system().jobs.tasks.queue, selection, action, reason,  # type: ignore[arg-type]
                              by=_by(), dry_run=not confirmed)
    if not confirmed:
        return await page("reclaim.html", preview=to_json(done),
                          will=min(done.matched, selection.most),
                          fields={k: str(form.get(k, "")) for k in BULK_RECLAIM_FIELDS})
    session().notify("ok", f"bulk reclaim: {done.reclaimed} of {done.matched} stale tasks "
                           f"reclaimed as {action}")
    return redirect(url_for("console.tasks", status="stale"), 303)


# ---- sites ---------------------------------------------------------------------------

@bp.post("/sites/<site>/<any(pause, resume):action>")
async def control_site(site: str, action: str) -> Redirect:
    form = await request.form
    done = await system().jobs.sites.set(site, "pause" if action == "pause" else "resume",
                                         by=_by(), reason=form_field(form, "reason"))
    session().notify("ok", f"site {site}: {'paused' if done.paused else 'resumed'}")
    return back_to(form, url_for("console.sites"))


@bp.post("/sites/<site>/throttle")
async def throttle_site(site: str) -> Redirect:
    """A rate in leases a second (a number > 0); empty lifts the throttle."""
    form = await request.form
    text = form_field(form, "leases_per_second", required=False)
    rate = None
    if text is not None:
        try:
            rate = float(text)
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and rate > 0) or not text.isascii():
            raise InvalidRequest("leases_per_second must be a number > 0, or empty to lift "
                                 "the throttle")
    done = await system().jobs.sites.set(site, "throttle", by=_by(), leases_per_second=rate)
    shown = "no throttle" if done.leases_per_second is None else \
        f"at most {done.leases_per_second:g} leases a second"
    session().notify("ok", f"site {site}: {shown}")
    return back_to(form, url_for("console.sites"))
