"""Replies of the webhooks actor, built from its rows; rendered to JSON at the HTTP
edge. A secret appears in a reply only when it is made (create, rotate)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal

from leasegate.actors.views import Instant
from leasegate.storage.engine import Row


@dataclass(frozen=True)
class EndpointView:
    endpoint_id: str
    tenant: str
    url: str
    events: tuple[str, ...]
    description: str
    disabled: bool
    disabled_reason: str | None
    created_at: Instant
    updated_at: Instant


@dataclass(frozen=True)
class CreatedEndpoint(EndpointView):
    secret: str = field(metadata={"description": "whsec_...: shown in this reply only"})


@dataclass(frozen=True)
class RotatedSecret:
    endpoint_id: str
    secret: str = field(metadata={"description": "The new secret, shown in this reply only."})
    previous_secret_expires_at: Instant = field(metadata={
        "description": "Until then the previous secret signs beside it."})


@dataclass(frozen=True)
class DeliveryView:
    delivery_id: str = field(metadata={
        "description": "The webhook-id header of each of its attempts."})
    endpoint_id: str
    event_type: str
    job_id: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_response: str | None = field(metadata={
        "description": "At most 1 KB of the last answer."})
    next_attempt_at: Instant | None
    created_at: Instant
    updated_at: Instant


@dataclass(frozen=True)
class Due:
    """A delivery claimed for an attempt: what to send, where, signed with what."""

    delivery_id: str
    endpoint_id: str
    tenant: str
    event_type: str
    channel: str
    job_id: str
    created_at: float
    body: str | None  # None before the first attempt: the job object is read then
    url: str
    secrets: tuple[str, ...]  # the current one first, then a rotated one still signing


@dataclass(frozen=True)
class Claimed:
    """The due deliveries claimed, and when the next is due after them (None: none)."""

    items: tuple[Due, ...]
    next_due: float | None


def endpoint_view(row: Row) -> EndpointView:
    return EndpointView(row["endpoint_id"], row["tenant"], row["url"],
                        tuple(json.loads(row["events"])), row["description"],
                        bool(row["disabled"]), row["disabled_reason"], row["created_at"],
                        row["updated_at"])


def created_endpoint(row: Row) -> CreatedEndpoint:
    return CreatedEndpoint(**dataclasses.asdict(endpoint_view(row)), secret=row["secret"])


def delivery_view(row: Row) -> DeliveryView:
    return DeliveryView(row["delivery_id"], row["endpoint_id"], row["event_type"],
                        row["job_id"], row["status"], row["attempts"],
                        row["last_status_code"], row["last_error"], row["last_response"],
                        row["next_attempt_at"] if row["status"] == "pending" else None,
                        row["created_at"], row["updated_at"])


def due(row: Row, now: float) -> Due:
    secrets: tuple[str, ...] = (row["secret"],)
    if row["old_secret"] is not None and now < row["old_secret_until"]:
        secrets += (row["old_secret"],)
    return Due(row["delivery_id"], row["endpoint_id"], row["tenant"], row["event_type"],
               row["channel"], row["job_id"], row["created_at"], row["body"], row["url"],
               secrets)

