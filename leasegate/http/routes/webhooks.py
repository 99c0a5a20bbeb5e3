"""Completion webhooks: ``/v1/webhooks``. A client key reaches its own tenant's
endpoints (another tenant's are 404); an admin key every tenant's, and names the
tenant of an endpoint it creates (``tenant`` in the body)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictBool, StringConstraints
from quart import Blueprint
from quart_schema import validate_querystring, validate_request

from leasegate.actors.pages import Paged
from leasegate.actors.webhooks import EventType
from leasegate.actors.webhooks.deliveries import ListDeliveries, RetryDelivery
from leasegate.actors.webhooks.endpoints import (
    MAX_DESCRIPTION,
    MAX_URL,
    URL_PATTERN,
    CreateEndpoint,
    DeleteEndpoint,
    GetEndpoint,
    ListEndpoints,
    RotateSecret,
    UpdateEndpoint,
    check_url,
)
from leasegate.actors.webhooks.views import (
    CreatedEndpoint,
    DeliveryView,
    EndpointView,
    RotatedSecret,
)
from leasegate.errors import Forbidden
from leasegate.http.models.jobs import Id, ListArgs, Strict, page
from leasegate.http.models.replies import answers
from leasegate.http.models.webhook_urls import check_destination
from leasegate.http.server.auth import allow, require_tenant
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json

bp = Blueprint("webhooks", __name__)

Url = Annotated[str, StringConstraints(min_length=1, max_length=MAX_URL, pattern=URL_PATTERN),
                Field(examples=["https://hooks.example.com/leasegate"])]
Events = Annotated[list[EventType], Field(min_length=1, max_length=8)]
URL_TEXT = ("Where deliveries are POSTed. Its form is the pattern's; a gateway without "
            "the webhook_allow_private setting also refuses (400) an http:// url and a "
            "host that does not resolve, or resolves to a loopback, private, link-local "
            "or reserved address.")
Description = Annotated[str, StringConstraints(max_length=MAX_DESCRIPTION)]


class CreateEndpointBody(Strict):
    url: Url = Field(description=URL_TEXT)
    events: Events
    description: Description = ""
    tenant: Id | None = Field(default=None, description="Whose jobs it hears: an admin key "
                              "must name the tenant; a client key's is its own.")


class UpdateEndpointBody(Strict):
    url: Url | None = Field(default=None, description=URL_TEXT)
    events: Events | None = None
    description: Description | None = None
    disabled: StrictBool | None = Field(default=None, description="false: enabled again "
                                        "(after it was disabled for failing)")


class EndpointListArgs(ListArgs):
    tenant: Id | None = Field(default=None, description="An admin's filter.")


class DeliveryList(BaseModel):  # the route wraps the actor's tuple of deliveries
    items: list[DeliveryView]


def _tenant() -> str | None:
    """The caller's tenant (None: an admin's, every tenant)."""
    return require_tenant("client")[1]


async def _check_destination(url: str) -> None:
    """The URL's form first (the actor's check: a 400, never a parser's exception),
    then where it may go."""
    check_url(url)
    await check_destination(url, system().settings.webhook_allow_private)


@bp.post("/v1/webhooks")
@allow("client")
@validate_request(CreateEndpointBody)
@answers(CreatedEndpoint, 409, status=201)
async def create_endpoint(data: CreateEndpointBody) -> tuple[Any, int]:
    """An endpoint that hears its tenant's jobs end (``events``); its signing secret
    is in this reply only."""
    own = _tenant()
    if own is None and data.tenant is None:
        # as POST /v1/schedules: a key with no tenant of its own may not make one
        raise Forbidden("tenant is required: an admin key creates an endpoint for the "
                        "tenant it names")
    if own is not None and data.tenant not in (None, own):
        raise Forbidden("a client key's endpoints hear its own tenant only")
    await _check_destination(data.url)
    reply = await system().webhooks.ask(CreateEndpoint(
        own or data.tenant or "", data.url, tuple(data.events), data.description))
    return to_json(reply), 201


@bp.get("/v1/webhooks")
@allow("client")
@validate_querystring(EndpointListArgs)
@answers(Paged[EndpointView])
async def list_endpoints(query_args: EndpointListArgs) -> Any:
    """Endpoints, newest first (an admin's: every tenant's, or ``tenant``'s)."""
    tenant = _tenant() or query_args.tenant
    return to_json(await system().webhooks.ask(ListEndpoints(page(query_args), tenant)))


@bp.get("/v1/webhooks/<endpoint_id>")
@allow("client")
@answers(EndpointView)
async def get_endpoint(endpoint_id: str) -> Any:
    """One endpoint (never its secret)."""
    return to_json(await system().webhooks.ask(GetEndpoint(endpoint_id, _tenant())))


@bp.patch("/v1/webhooks/<endpoint_id>")
@allow("client")
@validate_request(UpdateEndpointBody)
@answers(EndpointView)
async def update_endpoint(endpoint_id: str, data: UpdateEndpointBody) -> Any:
    """Change its url, events, description; ``disabled: false`` enables it again, and
    its pending deliveries are sent."""
    if data.url is not None:
        await _check_destination(data.url)
    reply = await system().webhooks.ask(UpdateEndpoint(
        endpoint_id, _tenant(), data.url, None if data.events is None else tuple(data.events),
        data.description, data.disabled))
    system().webhook_bell.ring()
    return to_json(reply)


@bp.delete("/v1/webhooks/<endpoint_id>")
@allow("client")
async def delete_endpoint(endpoint_id: str) -> tuple[str, int]:
    """Delete the endpoint and its deliveries (pending ones are never sent)."""
    await system().webhooks.ask(DeleteEndpoint(endpoint_id, _tenant()))
    return "", 204


@bp.post("/v1/webhooks/<endpoint_id>/rotate-secret")
@allow("client")
@answers(RotatedSecret)
async def rotate_secret(endpoint_id: str) -> Any:
    """A new signing secret, in this reply only; for 24 hours the previous one signs
    beside it (two signatures in ``webhook-signature``)."""
    return to_json(await system().webhooks.ask(RotateSecret(endpoint_id, _tenant())))


@bp.get("/v1/webhooks/<endpoint_id>/deliveries")
@allow("client")
@answers(DeliveryList)
async def list_deliveries(endpoint_id: str) -> Any:
    """The endpoint's last 100 deliveries, newest first."""
    items = await system().webhooks.ask(ListDeliveries(endpoint_id, _tenant()))
    return {"items": to_json(items)}


@bp.post("/v1/webhooks/<endpoint_id>/deliveries/<delivery_id>/retry")
@allow("client")
@answers(DeliveryView)
async def retry_delivery(endpoint_id: str, delivery_id: str) -> Any:
    """Send the delivery again now (whatever its status; the same body and id)."""
    reply = await system().webhooks.ask(RetryDelivery(endpoint_id, _tenant(), delivery_id))
    system().webhook_bell.ring()
    return to_json(reply)
