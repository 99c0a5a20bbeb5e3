"""Task artifacts: uploaded under the lease, read by the task's tenant."""

from __future__ import annotations

import re
from typing import Any

import trio
from quart import Blueprint, Response, current_app, request, send_file
from quart_trio.wrappers import TrioRequest
from werkzeug.exceptions import RequestEntityTooLarge

from leasegate.actors.tasks.artifacts import (
    CheckUpload,
    FindArtifact,
    ListArtifacts,
    RecordArtifact,
)
from leasegate.actors.tasks.views import ArtifactList, ArtifactStored
from leasegate.errors import ArtifactNotFound, InvalidRequest
from leasegate.http.models.replies import answers
from leasegate.http.server.auth import allow, require, require_tenant
from leasegate.http.server.context import checks_before_body, continue_body, system
from leasegate.http.server.render import to_json
from leasegate.ids import ARTIFACT_NAME_RULE, is_artifact_name, is_id
from leasegate.settings import Settings

bp = Blueprint("artifacts", __name__)

UPLOAD_PATH = re.compile(r"/v1/tasks/[^/]+/artifacts/[^/]+")


def body_limit(settings: Settings, method: str, path: str) -> int:
    """The largest body a route takes: ``max_artifact_bytes`` for an artifact upload,
    ``max_body_bytes`` for everything else (one rule for Quart and the body guard)."""
    limit: int = getattr(settings, body_limit_setting(method, path))
    return limit


def body_limit_setting(method: str, path: str) -> str:
    """The name of the setting that is :func:`body_limit` (for a 413's message)."""
    if method == "PUT" and UPLOAD_PATH.fullmatch(path):
        return "max_artifact_bytes"
    return "max_body_bytes"


def request_class(settings: Settings) -> type[TrioRequest]:
    """Quart fixes a request's body limit when it creates the request: set it by
    :func:`body_limit`."""

    class GatewayRequest(TrioRequest):
        def __init__(self, method: str, scheme: str, path: str, *args: Any,
                     **kwargs: Any) -> None:
            limit = kwargs["max_content_length"] = body_limit(settings, method, path)
            super().__init__(method, scheme, path, *args, **kwargs)
            # The body has its limit now; the request too, for the 413's message (else
            # it reads the app's, max_body_bytes, on every route).
            self.max_content_length = limit

    return GatewayRequest


def _checked_name(name: str) -> str:
    if not is_artifact_name(name):
        raise InvalidRequest(f"artifact names are {ARTIFACT_NAME_RULE}")
    return name


@bp.put("/v1/tasks/<task_id>/artifacts/<name>")
@allow("worker")
@checks_before_body
@answers(ArtifactStored, status=201)
async def put_artifact(task_id: str, name: str) -> tuple[Any, int]:
    """Upload raw bytes (the lease holder: headers ``X-Worker-Id``, ``X-Lease-Token``)."""
    principal = require("worker")
    _checked_name(name)
    worker_id = request.headers.get("X-Worker-Id", "")
    token = request.headers.get("X-Lease-Token", "")
    if not is_id(worker_id) or not 0 < len(token) <= 128:
        raise InvalidRequest("X-Worker-Id and X-Lease-Token headers are required")
    limit = request.max_content_length
    if request.content_length is not None and limit is not None and request.content_length > limit:
        raise RequestEntityTooLarge()  # as Quart would once the body is read: first
    sys = system()
    with current_app.extensions["leasegate.uploads"].hold(principal.key_id):
        # Before a byte of the body is read (or invited): a bogus task or token costs
        # no disk. RecordArtifact checks again once the body is staged.
        await sys.tasks.ask(CheckUpload(task_id, worker_id, token, principal.sites))
        await continue_body(request.scope)
        upload = await sys.stage_upload(request.body)
        try:
            stored = await sys.tasks.ask(RecordArtifact(
                task_id, worker_id, token, name, upload, principal.sites))
        finally:
            # Gone if it was placed; otherwise (refused, failed, cancelled) not kept.
            await sys.discard_upload(upload)
    return to_json(stored), 201


@bp.get("/v1/tasks/<task_id>/artifacts")
@allow("client")
@answers(ArtifactList)
async def list_artifacts(task_id: str) -> Any:
    """The task's artifacts (own tenant; admin: any)."""
    _, tenant = require_tenant("client")
    return to_json(await system().tasks.ask(ListArtifacts(task_id, tenant)))


@bp.get("/v1/tasks/<task_id>/artifacts/<name>")
@allow("client")
async def get_artifact(task_id: str, name: str) -> Response:
    """The artifact's bytes (own tenant; admin: any)."""
    _, tenant = require_tenant("client")
    _checked_name(name)
    sys = system()
    found = await sys.tasks.ask(FindArtifact(task_id, name, tenant))
    path = sys.artifact_path(task_id, name, found.sha256)
    if not await trio.to_thread.run_sync(path.is_file):
        raise ArtifactNotFound(f"the file of artifact {name} is missing")
    response = await send_file(path, mimetype="application/octet-stream",
                               as_attachment=True, attachment_filename=name)
    response.headers["X-Artifact-Sha256"] = found.sha256
    return response
