"""Live job events: ``GET /v1/events`` (Server-Sent Events), parsed and resumed.

The gateway ends each stream after ``max_wait_seconds``; the SDK's iterators
(``read_events``, ``_async/http.py``) reconnect by themselves with
``Last-Event-ID`` (and after transport errors, 5xx and 429, with the client's
:class:`Retry` pauses), so the caller sees one endless sequence of
:class:`JobEvent`. When the gateway cannot resume (the events were no longer
kept, or this reader fell behind) it yields a :class:`EventsReset`: re-read
whatever you show, then carry on. This module parses the stream and keeps the
place to resume from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

READ_TIMEOUT: Final = 60.0  # the gateway writes at least every 15 s (keep-alive comments)


@dataclass(frozen=True)
class JobEvent:
    """Something that happened to a task or query; ``status`` is the job's after it."""

    event_id: int
    channel: str  # "task" or "query"
    job_id: str
    tenant: str
    site: str
    device_id: str | None
    kind: str  # submitted, leased, started, renewed, result, settled, ...
    status: str
    at: str  # ISO 8601 UTC
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EventsReset:
    """Events were missed (why: ``reason``); re-read what you show. The stream goes on
    after ``event_id``."""

    reason: str
    event_id: int | None


Event = JobEvent | EventsReset


class SSEParser:
    """Server-Sent Events lines → (event type, id, data) of each complete message."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> tuple[str, str | None, str] | None:
        """None until a blank line ends a message with data or an id (a bare ``id:``
        only moves the place a reconnect resumes from)."""
        if not line:
            event, data, event_id = self._event or "message", self._data, self._id
            self._event, self._data, self._id = "", [], None
            return (event, event_id, "\n".join(data)) if data or event_id else None
        if line.startswith(":"):
            return None  # a comment: keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


class Cursor:
    """The filters of one ``events()`` call and where it stands."""

    def __init__(self, job_ids: Iterable[str] | None, site: str | None,
                 device_id: str | None, channel: str | None,
                 last_event_id: int | None) -> None:
        self.params: list[tuple[str, str | int | float | bool | None]] = [
            ("job_id", j) for j in job_ids or ()]
        self.params += [(k, v) for k, v in (("site", site), ("device_id", device_id),
                                            ("channel", channel)) if v is not None]
        self.last_event_id = last_event_id

    def headers(self) -> dict[str, str]:
        if self.last_event_id is None:
            return {"Accept": "text/event-stream"}
        return {"Accept": "text/event-stream", "Last-Event-ID": str(self.last_event_id)}

    def parse(self, message: tuple[str, str | None, str]) -> Event | None:
        kind, event_id, data = message
        if event_id is not None and event_id.isdigit():
            self.last_event_id = int(event_id)
        if not data:
            return None
        if kind == "job":
            body = json.loads(data)
            return JobEvent(int(body["event_id"]), body["channel"], body["job_id"],
                            body["tenant"], body["site"], body.get("device_id"),
                            body["kind"], body["status"], body["at"], body.get("detail") or {})
        if kind == "reset":
            return EventsReset(json.loads(data).get("reason", ""), self.last_event_id)
        return None  # a type this SDK does not know yet
