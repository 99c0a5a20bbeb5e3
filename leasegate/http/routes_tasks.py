"""Routes of the task channel (API.md "Tasks")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from quart import Blueprint
from quart_schema import document_response, validate_querystring, validate_request

from leasegate.actors.task_messages import (
    CancelTask,
    GetTask,
    LeaseTasks,
    ListTasks,
    PauseTask,
    ReclaimTask,
    RenewTask,
    ResumeTask,
    StartTask,
    SubmitTask,
    TaskResult,
)
from leasegate.actors.tasks import release_message
from leasegate.http.auth import require, require_submitter, require_tenant, worker_sites
from leasegate.http.common import check_json_field, long_poll, page, system
from leasegate.http.models import (
    ErrorEnvelope,
    FencedBody,
    LeaseBody,
    ReclaimBody,
    RenewBody,
    Renewed,
    Started,
    SubmitTaskBody,
    TaskLeases,
    TaskListArgs,
    TaskObject,
    TaskPage,
    TaskResultBody,
    TaskSubmitted,
)

bp = Blueprint("tasks", __name__)


def utc_timestamp(when: datetime) -> float:
    """API.md timestamps are UTC: one without a zone is read as UTC, never local time."""
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


async def _ask(message: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await system().tasks.mailbox.ask(message)
    return reply


@bp.post("/v1/tasks")
@validate_request(SubmitTaskBody)
@document_response(TaskSubmitted, 201)
@document_response(ErrorEnvelope, 409)
async def submit_task(data: SubmitTaskBody) -> tuple[dict[str, Any], int]:
    """Submit an irreversible task (client). Idempotent by ``task_id``."""
    tenant = require_submitter()
    check_json_field("params", data.params)
    reply = await _ask(SubmitTask(
        tenant=tenant, task_id=data.task_id, site=data.site, account=data.account,
        kind=data.kind, params=data.params, priority=data.priority,
        not_before=utc_timestamp(data.not_before) if data.not_before else None,
        device_id=data.device_id, batch_total=data.batch_total, max_cost=data.max_cost))
    return reply, 201 if reply["created"] else 200


@bp.get("/v1/tasks/<task_id>")
@document_response(TaskObject)
async def get_task(task_id: str) -> dict[str, Any]:
    """A task (own tenant; admin: any)."""
    _, tenant = require_tenant("client")
    return await _ask(GetTask(task_id, tenant))


@bp.get("/v1/tasks")
@validate_querystring(TaskListArgs)
@document_response(TaskPage)
async def list_tasks(query_args: TaskListArgs) -> dict[str, Any]:
    """Tasks, newest first (own tenant; admin: all)."""
    _, tenant = require_tenant("client")
    return await _ask(ListTasks(tenant=tenant, status=query_args.status, site=query_args.site,
                                account=query_args.account, kind=query_args.kind,
                                page=page(query_args)))


@bp.post("/v1/tasks/<task_id>/cancel")
@document_response(TaskObject)
@document_response(ErrorEnvelope, 409)
async def cancel_task(task_id: str) -> dict[str, Any]:
    """Cancel: queued/paused/leased now; running → ``cancel_requested``."""
    _, tenant = require_tenant("client")
    return await _ask(CancelTask(task_id, tenant))


@bp.post("/v1/tasks/<task_id>/pause")
@document_response(TaskObject)
@document_response(ErrorEnvelope, 409)
async def pause_task(task_id: str) -> dict[str, Any]:
    """Pause a batch task: queued → paused; leased/running → ``pause_requested``."""
    _, tenant = require_tenant("client")
    return await _ask(PauseTask(task_id, tenant))


@bp.post("/v1/tasks/<task_id>/resume")
@document_response(TaskObject)
@document_response(ErrorEnvelope, 409)
async def resume_task(task_id: str) -> dict[str, Any]:
    """Resume a paused batch task from its checkpoint (back to ``queued``)."""
    _, tenant = require_tenant("client")
    return await _ask(ResumeTask(task_id, tenant))


@bp.post("/v1/tasks/lease")
@validate_request(LeaseBody)
@document_response(TaskLeases)
async def lease_tasks(data: LeaseBody) -> dict[str, Any]:
    """Long-poll for up to ``max`` tasks on distinct lanes (worker)."""
    principal = require("worker")
    message = LeaseTasks(worker_id=data.worker_id, sites=worker_sites(principal, data.sites),
                         max=data.max, request_id=data.request_id, wait=data.wait_seconds > 0)
    items = await long_poll(system().tasks.mailbox, message, data.wait_seconds,
                            release_message, [])
    return {"items": items}


@bp.post("/v1/tasks/<task_id>/start")
@validate_request(FencedBody)
@document_response(Started)
@document_response(ErrorEnvelope, 409)
async def start_task(task_id: str, data: FencedBody) -> dict[str, Any]:
    """Turn a claim into a running lease; only then may the worker touch the site."""
    principal = require("worker")
    return await _ask(StartTask(task_id, data.worker_id, data.lease_token, principal.sites))


@bp.post("/v1/tasks/<task_id>/renew")
@validate_request(RenewBody)
@document_response(Renewed)
@document_response(ErrorEnvelope, 409)
async def renew_task(task_id: str, data: RenewBody) -> dict[str, Any]:
    """Extend the running lease; the reply carries cancel and pause requests."""
    principal = require("worker")
    check_json_field("progress", data.progress)
    return await _ask(RenewTask(task_id, data.worker_id, data.lease_token, data.progress,
                                sites=principal.sites))


@bp.post("/v1/tasks/<task_id>/result")
@validate_request(TaskResultBody)
@document_response(TaskObject)
@document_response(ErrorEnvelope, 409)
async def task_result(task_id: str, data: TaskResultBody) -> dict[str, Any]:
    """Report how the task ended; a stale task accepts its last lease's result."""
    principal = require("worker")
    check_json_field("result", data.result)
    check_json_field("progress", data.progress)
    return await _ask(TaskResult(
        task_id=task_id, worker_id=data.worker_id, lease_token=data.lease_token,
        sites=principal.sites,
        outcome=data.outcome, result=data.result,
        error_code=data.error.code if data.error else None,
        error_message=data.error.message if data.error else None,
        cost=data.cost, progress=data.progress))


@bp.post("/v1/tasks/<task_id>/reclaim")
@validate_request(ReclaimBody)
@document_response(TaskObject)
@document_response(ErrorEnvelope, 409)
async def reclaim_task(task_id: str, data: ReclaimBody) -> dict[str, Any]:
    """Resolve a stale task (admin): requeue, succeeded or failed, with a reason."""
    principal = require("admin")
    check_json_field("result", data.result)
    return await _ask(ReclaimTask(task_id, data.action, data.reason,
                                  by=f"{principal.name} ({principal.key_id})",
                                  result=data.result, cost=data.cost))
