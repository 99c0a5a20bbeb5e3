"""Routes of the task channel: requests → task actor messages → JSON."""

from __future__ import annotations

import functools
from typing import Any

import trio
from quart import Blueprint
from quart_schema import validate_querystring, validate_request

from leasegate.actors.devices.forwarder import see_device
from leasegate.actors.pages import JobPage
from leasegate.actors.runtime.batches import ask_each
from leasegate.actors.tasks.control import ControlAction, ControlTask, ReclaimTask
from leasegate.actors.tasks.fenced import (
    RenewTask,
    RenewTasks,
    StartTask,
    StartTasks,
    TaskResult,
    TaskResults,
)
from leasegate.actors.tasks.lease import LeaseTasks, LeaseTasksAfterResults, release_message
from leasegate.actors.tasks.reads import ListTasks
from leasegate.actors.tasks.submit import SubmitTask
from leasegate.actors.tasks.views import Renewed, Started, TaskSubmitted, TaskView
from leasegate.errors import DeviceLimit, LeasegateError
from leasegate.http.models.jobs import (
    FencedBody,
    ReclaimBody,
    RenewBody,
    StartItem,
    StartTasksBody,
    SubmitTaskBody,
    SubmitTasksBody,
    TaskListArgs,
    TaskResultBody,
    TaskResultItem,
    TaskResultsBody,
    WaitArgs,
    reported_error,
)
from leasegate.http.models.operator import CancelBody
from leasegate.http.models.payloads import check_json_field
from leasegate.http.models.replies import (
    TaskItems,
    TasksStarted,
    TasksSubmitted,
    answers,
)
from leasegate.http.models.workers import (
    RenewItem,
    RenewTasksBody,
    TaskLeaseBody,
    TaskLeaseReply,
    TasksRenewed,
)
from leasegate.http.openapi.document import optional_body
from leasegate.http.routes import batches
from leasegate.http.routes.jobs import job_reply, search_reply
from leasegate.http.routes.lease_calls import lease_after_results
from leasegate.http.routes.operator import optional_reason, signed
from leasegate.http.server.auth import allow, require, require_tenant
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json

bp = Blueprint("tasks", __name__)


@bp.post("/v1/tasks")
@batches.submit_route(SubmitTaskBody, TaskSubmitted, single=True)
async def submit_task(data: SubmitTaskBody) -> tuple[Any, int]:
    """Submit an irreversible task (client). Idempotent by ``task_id``."""
    tenant, sys = batches.submitter(), system()
    message = _submit_message(tenant, data)  # a bad body (400, 413) sights no device
    if message.device_id is not None:  # a sighting; a full device table refuses (6008) first
        await see_device(sys.devices, sys.tasks, tenant, message.device_id)
    # With max_cost: hold on the tenant's account first (402 when short), then enqueue.
    return batches.submitted(await sys.jobs.tasks.submit(message))


def _submit_message(tenant: str, data: SubmitTaskBody, limit: int | None = None) -> SubmitTask:
    check_json_field("params", data.params, limit)
    return SubmitTask(
        tenant=tenant, task_id=data.task_id, site=data.site, account=data.account,
        kind=data.kind, params=data.params, priority=data.priority,
        not_before=data.not_before.timestamp() if data.not_before else None,  # has its zone
        device_id=data.device_id, batch_total=data.batch_total, max_cost=data.max_cost)


@bp.post("/v1/tasks/batch")
@batches.submit_route(SubmitTasksBody, TasksSubmitted, single=False)
async def submit_tasks(data: SubmitTasksBody) -> Any:
    """Submit 1–100 tasks (client) in one commit, each answered on its own.

    Each item gets the status ``POST /v1/tasks`` would give it alone (201, a 200
    replay, 400, 402, 409...). An id given twice in one batch: the second is a
    replay of the first."""
    tenant = batches.submitter()
    items = await _see_devices(tenant, batches.each_body(
        SubmitTaskBody, data.items, lambda body, limit: _submit_message(tenant, body, limit)))
    return batches.reply("task", await system().jobs.tasks.submit_many(items), batches.created,
                         batches.receipt)


async def _see_devices(tenant: str, items: list[SubmitTask | LeasegateError],
                       ) -> list[SubmitTask | LeasegateError]:
    """Each device a batch names is sighted once, as by a single submit, all at once (so
    the sightings share the tracker's group commit); the items of a device the full
    table refuses (6008) are refused and nothing of theirs is enqueued."""
    sys = system()
    named = {item.device_id for item in items
             if isinstance(item, SubmitTask) and item.device_id is not None}
    refused: dict[str, LeasegateError] = {}

    async def see(device_id: str) -> None:
        try:
            await see_device(sys.devices, sys.tasks, tenant, device_id)
        except DeviceLimit as exc:
            refused[device_id] = exc

    async with trio.open_nursery() as nursery:
        for device_id in sorted(named):
            nursery.start_soon(see, device_id)
    return [refused.get(item.device_id, item)
            if isinstance(item, SubmitTask) and item.device_id is not None else item
            for item in items]


@bp.get("/v1/tasks/<task_id>")
@allow("client")
@validate_querystring(WaitArgs)
@answers(TaskView)
async def get_task(task_id: str, query_args: WaitArgs) -> Any:
    """A task (own tenant; admin: any). With ``wait_seconds`` (0–30) it long-polls until
    the task is finished (succeeded, failed, canceled, expired) or needs someone
    (stale, paused)."""
    return await job_reply(system().jobs.tasks, task_id, query_args.wait_seconds)


@bp.get("/v1/tasks")
@allow("client")
@validate_querystring(TaskListArgs)
@answers(JobPage[TaskView])
async def list_tasks(query_args: TaskListArgs) -> Any:
    """Tasks, newest first (own tenant; admin: all), that match every filter given."""
    return await search_reply(system().jobs.tasks, query_args,
                              functools.partial(ListTasks, status=query_args.status,
                                                account=query_args.account))


def _control_route(action: ControlAction, doc: str) -> None:
    """``POST /v1/tasks/{id}/<action>``: cancel, pause and resume are one route each,
    written once."""

    async def control(task_id: str) -> Any:
        principal, tenant = require_tenant("client")
        reason = await optional_reason()
        by = signed(principal) if principal.role == "admin" else None
        return to_json(await system().jobs.tasks.ask(ControlTask(
            task_id, action, tenant, by=by, reason=reason)))

    control.__name__ = f"{action}_task"
    control.__doc__ = doc
    view = answers(TaskView, 409)(optional_body(CancelBody)(control))
    bp.post(f"/v1/tasks/<task_id>/{action}")(allow("client")(view))


_control_route("cancel", "Cancel: queued/paused/leased now; running → ``cancel_requested``.")
_control_route("pause", "Pause a batch task: queued → paused; leased/running → "
                        "``pause_requested``.")
_control_route("resume", "Resume a paused batch task from its checkpoint (back to ``queued``).")


@bp.post("/v1/tasks/lease")
@allow("worker")
@validate_request(TaskLeaseBody)
@answers(TaskLeaseReply)
async def lease_tasks(data: TaskLeaseBody) -> Any:
    """Long-poll for up to ``max`` tasks on distinct lanes (worker).

    ``results``: the outcomes of the worker's previous tasks, reported before the lease
    in the same commit, each answered on its own in the reply's ``results``, as
    ``POST /v1/tasks/results`` would answer it."""
    principal = require("worker")
    sites = principal.sites
    results = None if data.results is None else batches.each_body(
        TaskResultItem, data.results,
        lambda item, limit: _result_message(item.task_id, data.worker_id, sites, item, limit))
    return await lease_after_results("task", system().jobs.tasks, LeaseTasks, data, principal,
                                     results, LeaseTasksAfterResults, release_message)


@bp.post("/v1/tasks/start")
@allow("worker")
@validate_request(StartTasksBody)
@answers(TasksStarted)
async def start_tasks(data: StartTasksBody) -> Any:
    """Start 1–100 claims (worker), each fenced and answered on its own.

    Only a task whose item is 200 may be touched."""
    principal = require("worker")
    starts = batches.each_item(StartItem, data.items, lambda item: StartTask(
        item.task_id, data.worker_id, item.lease_token, sites=principal.sites))
    return batches.reply("task", await ask_each(system().tasks, StartTasks, starts))


@bp.post("/v1/tasks/renew")
@allow("worker")
@validate_request(RenewTasksBody)
@answers(TasksRenewed)
async def renew_tasks(data: RenewTasksBody) -> Any:
    """Renew 1–100 running leases (worker) in one call, each fenced and answered on its
    own with its new ``lease_expires_at`` and the task's cancel and pause requests."""
    principal = require("worker")
    renewals = batches.each_body(RenewItem, data.items, lambda item, limit: _renewal(
        item, data.worker_id, principal.sites, limit))
    return batches.reply("task", await ask_each(system().tasks, RenewTasks, renewals))


def _renewal(item: RenewItem, worker_id: str, sites: tuple[str, ...] | None,
             limit: int) -> RenewTask:
    check_json_field("progress", item.progress, limit)
    return RenewTask(item.task_id, worker_id, item.lease_token, item.progress, sites=sites)


@bp.post("/v1/tasks/results")
@allow("worker")
@validate_request(TaskResultsBody)
@answers(TaskItems)
async def task_results(data: TaskResultsBody) -> Any:
    """Report 1–100 results (worker), each fenced and answered on its own."""
    sites = require("worker").sites
    return await batches.each_reported(
        "task", system().jobs.tasks, TaskResults, TaskResultItem, data.items,
        lambda item, limit: _result_message(item.task_id, data.worker_id, sites, item, limit))


@bp.post("/v1/tasks/<task_id>/start")
@allow("worker")
@validate_request(FencedBody)
@answers(Started, 409)
async def start_task(task_id: str, data: FencedBody) -> Any:
    """Turn a claim into a running lease; only then may the worker touch the site."""
    principal = require("worker")
    return to_json(await system().tasks.ask(StartTask(
        task_id, data.worker_id, data.lease_token, sites=principal.sites)))


@bp.post("/v1/tasks/<task_id>/renew")
@allow("worker")
@validate_request(RenewBody)
@answers(Renewed, 409)
async def renew_task(task_id: str, data: RenewBody) -> Any:
    """Extend the running lease; the reply carries cancel and pause requests."""
    principal = require("worker")
    check_json_field("progress", data.progress)
    return to_json(await system().tasks.ask(RenewTask(
        task_id, data.worker_id, data.lease_token, data.progress, sites=principal.sites)))


@bp.post("/v1/tasks/<task_id>/result")
@allow("worker")
@validate_request(TaskResultBody)
@answers(TaskView, 409)
async def task_result(task_id: str, data: TaskResultBody) -> Any:
    """Report how the task ended; a stale task accepts its last lease's result."""
    principal = require("worker")
    return to_json(await system().jobs.tasks.ask(
        _result_message(task_id, data.worker_id, principal.sites, data)))


def _result_message(task_id: str, worker_id: str, sites: tuple[str, ...] | None,
                    body: TaskResultBody | TaskResultItem,
                    limit: int | None = None) -> TaskResult:
    """A result, single or one item of a batch, as the task actor takes it."""
    check_json_field("result", body.result, limit)
    check_json_field("progress", body.progress, limit)
    return TaskResult(
        task_id=task_id, worker_id=worker_id, lease_token=body.lease_token, sites=sites,
        outcome=body.outcome, result=body.result, **reported_error(body.error),
        cost=body.cost, progress=body.progress)


@bp.post("/v1/tasks/<task_id>/reclaim")
@allow("admin")
@validate_request(ReclaimBody)
@answers(TaskView, 409)
async def reclaim_task(task_id: str, data: ReclaimBody) -> Any:
    """Resolve a stale task (admin): requeue, succeeded or failed, with a reason."""
    principal = require("admin")
    check_json_field("result", data.result)
    return to_json(await system().jobs.tasks.ask(ReclaimTask(
        task_id, data.action, data.reason, by=signed(principal),
        result=data.result, cost=data.cost)))
