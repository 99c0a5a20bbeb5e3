"""The reads both channels' routes answer alike: one job (``GET /v1/tasks/{id}``,
long-polled) and a search (``GET /v1/tasks``), within the caller's tenant (an
admin's: every tenant). The console's lists make their list messages here too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leasegate.actors.jobs.channel import JobChannel
from leasegate.actors.pages import JobPage, Page, Paged
from leasegate.actors.runtime.mailbox import Ask
from leasegate.http.models.jobs import SearchArgs, page
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


def search_fields(args: SearchArgs, scope: str | None, page: Page) -> dict[str, Any] | None:
    """The list message's fields of ``args``, seen by a caller whose jobs are
    ``scope``'s (a client's tenant; None: an admin, every tenant); None when the
    caller may see nothing of what it asks (a client naming another tenant)."""
    if scope is not None and args.tenant not in (None, scope):
        return None
    return {"tenant": scope or args.tenant, "site": args.site, "kind": args.kind,
            "worker": args.worker, "id_prefix": args.id_prefix,
            "since": args.since.timestamp() if args.since else None,
            "until": args.until.timestamp() if args.until else None,
            "text": args.text, "page": page}


def nothing(page: Page) -> JobPage[Any]:
    """The empty page of a search that may see nothing."""
    return JobPage((), 0, page.limit, page.offset)
