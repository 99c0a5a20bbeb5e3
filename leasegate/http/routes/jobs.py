"""The reads both channels' routes answer alike: one job (``GET /v1/tasks/{id}``,
long-polled) and a search (``GET /v1/tasks``), within the caller's tenant (an
admin's: every tenant)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leasegate.actors.jobs.channel import JobChannel
from leasegate.actors.pages import Paged
from leasegate.actors.runtime.mailbox import Ask
from leasegate.http.models.jobs import page
from leasegate.http.models.search import SearchArgs
from leasegate.http.routes.search import nothing, search_fields
from leasegate.http.server.auth import require_tenant
from leasegate.http.server.context import system
from leasegate.http.server.long_poll import place_while_waiting
from leasegate.http.server.render import to_json


async def job_reply(channel: JobChannel[Any, Any, Any], job_id: str,
                    wait_seconds: float | None) -> Any:
    """The job, once settled or when ``wait_seconds`` run out (0 or None: at once)."""
    _, tenant = require_tenant("client")
    wait = wait_seconds or 0
    with place_while_waiting(wait, system().settings.max_wait_seconds):
        return to_json(await channel.get(job_id, tenant, wait_seconds=wait))


async def search_reply(channel: JobChannel[Any, Any, Any], args: SearchArgs,
                       message: Callable[..., Ask[Any, Paged[Any]]]) -> Any:
    """The page ``args`` ask for of the jobs that match them: ``message`` (the channel's
    list message) of the shared filters (``search.search_fields``)."""
    _, tenant = require_tenant("client")
    asked = page(args)
    fields = search_fields(args, tenant, asked)
    if fields is None:
        return to_json(nothing(asked))
    return to_json(await channel.page(message(**fields)))
