"""Request and reply models of ``/v1/webhooks`` (validation at the edge, and
``/openapi.json``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StrictBool, StringConstraints

from leasegate.actors.webhooks import EventType
from leasegate.actors.webhooks.endpoints import MAX_DESCRIPTION, MAX_URL, URL_PATTERN
from leasegate.http.models.jobs import Id, ListArgs, Strict, Timestamp
from leasegate.http.models.replies import ListPage

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


class EndpointObject(BaseModel):
    endpoint_id: str
    tenant: str
    url: str
    events: list[str]
    description: str
    disabled: bool
    disabled_reason: str | None
    created_at: Timestamp
    updated_at: Timestamp


class CreatedEndpoint(EndpointObject):
    secret: str = Field(description="whsec_...: shown in this reply only")


class RotatedSecret(BaseModel):
    endpoint_id: str
    secret: str = Field(description="The new secret, shown in this reply only.")
    previous_secret_expires_at: Timestamp = Field(
        description="Until then the previous secret signs beside it.")


class EndpointPage(ListPage):
    items: list[EndpointObject]


class DeliveryObject(BaseModel):
    delivery_id: str = Field(description="The webhook-id header of each of its attempts.")
    endpoint_id: str
    event_type: str
    job_id: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_response: str | None = Field(description="At most 1 KB of the last answer.")
    next_attempt_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp


class DeliveryList(BaseModel):
    items: list[DeliveryObject]
