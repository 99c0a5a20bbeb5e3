"""Job history and live job events: ``GET /v1/{tasks,queries}/{id}/events``, ``GET /v1/events``.

The live stream is Server-Sent Events. Each event is::

    id: 42
    event: job
    data: {"event_id": 42, "channel": "task", "job_id": "t1", "tenant": "acme", ...}

A stream lasts at most ``max_wait_seconds`` (it is a long-poll that delivers
many events, bounded like the others, below every proxy's and hypercorn's
idle timeout); then the client reconnects with ``Last-Event-ID`` (browsers'
``EventSource`` and the SDK do) and misses nothing while the event is still
kept. When it cannot resume (too old, unknown, or it fell behind while
reading): ``event: reset`` with ``data: {"reason": ...}`` and an ``id:`` as of
now; the client re-reads what it shows. Idle streams get ``: keep-alive``.
A stream opens (and, if its filter skipped events, ends) with a bare ``id:``,
so a reconnect resumes from where it was even when no event came.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Final, Literal

import trio
from pydantic import Field
from quart import Blueprint, Response, request
from quart_schema import validate_querystring

from leasegate.actors.event_stream import EventFilter, JobEvent, Reset
from leasegate.actors.payloads import compact_json
from leasegate.actors.queue.history import History
from leasegate.errors import InvalidRequest
from leasegate.http.models.jobs import Id, Strict
from leasegate.http.models.numbers import ASCII_DIGITS, whole_number
from leasegate.http.models.replies import answers
from leasegate.http.server.auth import allow, client_address, require_tenant
from leasegate.http.server.context import system
from leasegate.http.server.long_poll import waiting_polls
from leasegate.http.server.render import to_json

bp = Blueprint("events", __name__)

MAX_JOB_IDS: Final = 100
MAX_EVENT_ID: Final = 2**63 - 1
RETRY_MS: Final = 1000  # how soon an EventSource reconnects after a stream ends


class EventArgs(Strict):
    job_id: Id | Annotated[list[Id], Field(min_length=1, max_length=MAX_JOB_IDS)] | None = (
        Field(default=None, description=f"Only these jobs (repeatable, at most "
                                        f"{MAX_JOB_IDS})."))
    site: Id | None = Field(default=None, description="Only jobs of this site.")
    device_id: Id | None = Field(default=None, description="Only tasks bound to this "
                                                           "device.")
    channel: Literal["task", "query"] | None = Field(
        default=None, description="Only tasks, or only queries.")
    last_event_id: Annotated[int, Field(ge=0, le=MAX_EVENT_ID), ASCII_DIGITS] | None = Field(
        default=None, description="Resume after this event (the `Last-Event-ID` header "
                                  "wins).")


@bp.get("/v1/tasks/<task_id>/events")
@allow("client")
@answers(History)
async def task_history(task_id: str) -> Any:
    """A task's history, oldest first (own tenant; admin: any)."""
    return to_json(await system().jobs.tasks.history(task_id, require_tenant("client")[1]))


@bp.get("/v1/queries/<query_id>/events")
@allow("client")
@answers(History)
async def query_history(query_id: str) -> Any:
    """A query's history, oldest first (own tenant; admin: any)."""
    return to_json(await system().jobs.queries.history(query_id, require_tenant("client")[1]))


@bp.get("/v1/events")
@allow("client")
@validate_querystring(EventArgs)
async def job_events(query_args: EventArgs) -> Response:
    """Live job events as Server-Sent Events (own tenant; admin: all), filtered by
    ``job_id``, ``site``, ``device_id``, ``channel``; resumes after ``Last-Event-ID``."""
    principal, tenant = require_tenant("client")
    sys = system()
    settings = sys.settings
    polls, address = waiting_polls(), client_address()
    polls.check(principal.key_id, address)  # a stream is a waiting poll too
    job_ids = query_args.job_id  # ids, at most MAX_JOB_IDS (checked by EventArgs)
    wanted = [job_ids] if isinstance(job_ids, str) else list(job_ids or ())
    reader = sys.events.subscribe(EventFilter(tenant, frozenset(wanted), query_args.site,
                                       query_args.device_id, query_args.channel),
                           _last_event_id(query_args.last_event_id))

    async def stream() -> AsyncIterator[bytes]:
        # Counted only while it runs: a stream never started holds nothing.
        with reader.streaming() as counted, polls.holding(
                principal.key_id, address, settings.max_wait_seconds, reader.end) as held:
            if not (counted and held):  # raced past the checks above: end at once
                return
            await reader.begin()
            # The id where this stream starts: a reconnect resumes from here even if no
            # event came (an EventSource keeps the last id it was given).
            yield f"id: {reader.cursor}\nretry: {RETRY_MS}\n\n".encode()
            start = reader.cursor
            ends = trio.current_time() + settings.max_wait_seconds
            while (remaining := ends - trio.current_time()) > 0:
                got = await reader.next(min(settings.event_keepalive_seconds, remaining))
                if got is None:  # the gateway drains, or the key was revoked
                    return
                if isinstance(got, Reset):
                    yield _message("reset", got.event_id, {"reason": got.reason})
                elif got:
                    yield b"".join(_message("job", e.event_id, _wire(e)) for e in got)
                elif ends - trio.current_time() > 0:
                    yield b": keep-alive\n\n"
            if reader.cursor != start:  # past events filtered out: resume after them
                yield f"id: {reader.cursor}\n\n".encode()

    response = Response(stream(), 200, {
        "Content-Type": "text/event-stream", "Cache-Control": "no-store",
        "X-Accel-Buffering": "no"})  # nginx: pass each event on at once
    response.timeout = None  # the stream ends itself (max_wait_seconds)
    return response


def _last_event_id(from_query: int | None) -> int | None:
    given = request.headers.get("Last-Event-ID")
    if given is None:
        return from_query
    found = whole_number(given.strip(), MAX_EVENT_ID)
    if found is None:
        raise InvalidRequest("Last-Event-ID must be an event id (a non-negative integer)")
    return found


def _wire(event: JobEvent) -> dict[str, Any]:
    found: dict[str, Any] = to_json(event)
    return found


def _message(kind: str, event_id: int, data: dict[str, Any]) -> bytes:
    body = compact_json(data)  # a payload's numbers as they were sent
    return f"id: {event_id}\nevent: {kind}\ndata: {body}\n\n".encode()
