"""Messages about endpoints, each followed by its handler. A client reaches its own
tenant's endpoints (``tenant``; another tenant's are 404), an admin every one (None).

The URL is checked here for its form (http or https, a host, no credentials in it);
whether it may be http and where its host resolves is the HTTP edge's check
(``webhook_urls``), which can wait on DNS where an actor's turn cannot."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from leasegate.actors.checks import check_flag, check_id, check_text
from leasegate.actors.pages import Paged, TenantPage, paged
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.webhooks import EVENT_TYPES, ROTATION_OVERLAP, Webhooks
from leasegate.actors.webhooks.turn import WEBHOOKS, WebhookTurn
from leasegate.actors.webhooks.views import (
    CreatedEndpoint,
    EndpointView,
    RotatedSecret,
    created_endpoint,
    endpoint_view,
)
from leasegate.errors import InvalidRequest, NotFound, StateConflict
from leasegate.storage import webhooks_sql as sql
from leasegate.storage.engine import Row

R = TypeVar("R")
MAX_URL = 2048
MAX_DESCRIPTION = 500
# The form a url must have, whole (the document's pattern says the same): http or https,
# a host name or IPv4 address (no user:password@, no IPv6 literal), a port of 0-65535
# if any, then a path, query or fragment in printable ASCII without spaces.
_PORT = r"0*(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
URL_PATTERN = rf"^https?://[A-Za-z0-9._~-]+(?::(?:{_PORT})?)?(?:[/?#][!-~]*)?$"
URL_RULE = ("url must be an http:// or https:// URL with a host name or IPv4 address "
            "(no user:password@), an optional port up to 65535, and printable ASCII "
            "without spaces")
_URL = re.compile(URL_PATTERN)


def check_url(url: object) -> None:
    check_text("url", url, most=MAX_URL, empty=False)
    assert isinstance(url, str)
    if _URL.fullmatch(url) is None:
        raise InvalidRequest(URL_RULE)
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (a port out of range raises)
    except ValueError as exc:
        raise InvalidRequest(f"url is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidRequest("url must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest("url must not carry credentials (user:password@)")
    if not url.isprintable() or " " in url:
        raise InvalidRequest("url must not hold spaces or control characters")


def check_events(events: object) -> None:
    if (not isinstance(events, tuple) or not events
            or not all(isinstance(e, str) for e in events)):
        raise InvalidRequest(f"events must be a non-empty list of {', '.join(EVENT_TYPES)}")
    unknown = [e for e in events if e not in EVENT_TYPES]
    if unknown:
        raise InvalidRequest(f"unknown event {unknown[0]!r:.80}; events are "
                             f"{', '.join(EVENT_TYPES)}")


@dataclass(frozen=True)
class CreateEndpoint(Ask[Webhooks, CreatedEndpoint]):
    tenant: str
    url: str
    events: tuple[str, ...]
    description: str = ""

    def check(self) -> None:
        check_id("tenant", self.tenant)
        check_url(self.url)
        check_events(self.events)
        check_text("description", self.description, most=MAX_DESCRIPTION)


@WEBHOOKS.on(CreateEndpoint)
def create(turn: WebhookTurn, m: CreateEndpoint) -> CreatedEndpoint:
    bound = turn.settings.webhook_max_endpoints
    if sql.count_endpoints(turn.conn, m.tenant) >= bound:
        raise StateConflict(f"tenant {m.tenant} has {bound} webhook endpoints, the most "
                            "one may have (webhook_max_endpoints); delete one first")
    endpoint_id = sql.create_endpoint(turn.conn, m.tenant, m.url, _distinct(m.events),
                                      m.description, turn.now)
    return created_endpoint(endpoint(turn, endpoint_id, None))


@dataclass(frozen=True)
class ListEndpoints(TenantPage[Webhooks, EndpointView]):
    """A tenant's endpoints (None: every tenant's), newest first."""


@WEBHOOKS.on(ListEndpoints)
def list_endpoints(turn: WebhookTurn, m: ListEndpoints) -> Paged[EndpointView]:
    return paged(sql.page_endpoints(turn.conn, m.tenant, m.page.limit, m.page.offset),
                 endpoint_view, m.page)


@dataclass(frozen=True)
class OfEndpoint(Ask[Webhooks, R]):
    """A message about one endpoint, as ``tenant`` (None: an admin's) may see it."""

    endpoint_id: str
    tenant: str | None

    def check(self) -> None:
        check_id("endpoint_id", self.endpoint_id)
        check_id("tenant", self.tenant, optional=True)


@dataclass(frozen=True)
class GetEndpoint(OfEndpoint[EndpointView]):
    """The endpoint (never its secret)."""


@WEBHOOKS.on(GetEndpoint)
def get(turn: WebhookTurn, m: GetEndpoint) -> EndpointView:
    return endpoint_view(endpoint(turn, m.endpoint_id, m.tenant))


@dataclass(frozen=True)
class UpdateEndpoint(OfEndpoint[EndpointView]):
    """Change the fields given (None: unchanged). ``disabled: False`` enables an
    endpoint again (its reason and its run of failures forgotten)."""

    url: str | None = None
    events: tuple[str, ...] | None = None
    description: str | None = None
    disabled: bool | None = None

    def check(self) -> None:
        super().check()
        if self.url is not None:
            check_url(self.url)
        if self.events is not None:
            check_events(self.events)
        check_text("description", self.description, most=MAX_DESCRIPTION, optional=True)
        if self.disabled is not None:
            check_flag("disabled", self.disabled)


@WEBHOOKS.on(UpdateEndpoint)
def update(turn: WebhookTurn, m: UpdateEndpoint) -> EndpointView:
    endpoint(turn, m.endpoint_id, m.tenant)
    sql.update_endpoint(turn.conn, m.endpoint_id, turn.now, url=m.url,
                        events=None if m.events is None else _distinct(m.events),
                        description=m.description, disabled=m.disabled)
    return endpoint_view(endpoint(turn, m.endpoint_id, m.tenant))


@dataclass(frozen=True)
class DeleteEndpoint(OfEndpoint[bool]):
    """Delete the endpoint and its deliveries (pending ones are never sent)."""


@WEBHOOKS.on(DeleteEndpoint)
def delete(turn: WebhookTurn, m: DeleteEndpoint) -> bool:
    endpoint(turn, m.endpoint_id, m.tenant)
    sql.delete_endpoint(turn.conn, m.endpoint_id)
    return True


@dataclass(frozen=True)
class RotateSecret(OfEndpoint[RotatedSecret]):
    """A new secret; the current one signs beside it for 24 hours (a secret rotated
    again within them is dropped at once: two sign at most)."""


@WEBHOOKS.on(RotateSecret)
def rotate(turn: WebhookTurn, m: RotateSecret) -> RotatedSecret:
    endpoint(turn, m.endpoint_id, m.tenant)
    sql.rotate_secret(turn.conn, m.endpoint_id, turn.now, ROTATION_OVERLAP)
    row = endpoint(turn, m.endpoint_id, m.tenant)
    return RotatedSecret(m.endpoint_id, row["secret"], row["old_secret_until"])


def endpoint(turn: WebhookTurn, endpoint_id: str, tenant: str | None) -> Row:
    """The endpoint, if it exists and ``tenant`` (None: any, an admin) may see it."""
    row = sql.get_endpoint(turn.conn, endpoint_id)
    if row is None or (tenant is not None and row["tenant"] != tenant):
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return row


def _distinct(events: tuple[str, ...]) -> list[str]:
    return list(dict.fromkeys(events))
