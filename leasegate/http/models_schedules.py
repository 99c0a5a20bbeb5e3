"""Request and reply models of the schedules routes (``/openapi.json`` and validation)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool, StringConstraints

from leasegate.actors.schedules.cron import MAX_TIMEZONE
from leasegate.http.models import Id, ListArgs, Strict, Timestamp
from leasegate.http.models_replies import ListPage


class PutScheduleBody(Strict):
    cron: Annotated[str, StringConstraints(min_length=1, max_length=200), Field(
        description="Five cron fields (minute hour day-of-month month day-of-week), "
                    "e.g. `0 2 * * *`.")]
    timezone: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TIMEZONE),
                        Field(description="IANA time zone the cron fields are read in.")
                        ] = "UTC"
    channel: Literal["task", "query"]
    template: dict[str, Any] = Field(description=(
        "What `POST /v1/tasks` (or `/v1/queries`) takes, without its id, `not_before` "
        "or `device_id`: each fire submits it as the job `<schedule_id>@<fire time>`."))
    overlap: Literal["skip", "allow"] = Field("skip", description=(
        "`skip`: no fire while the previous fire's job is unfinished."))
    catch_up: Literal["latest", "none", "all"] = Field("latest", description=(
        "Fires missed while no gateway ran: the most recent one, none, or each "
        "(at most 100)."))
    paused: StrictBool = False
    tenant: Id | None = Field(None, description=(
        "Whose schedule: an admin key must name it; a client key's is its own."))


class ScheduleListArgs(ListArgs):
    tenant: Id | None = None  # admin only: one tenant's


class FireErrorObject(BaseModel):
    code: int
    type: str
    message: str


class FireObject(BaseModel):
    fire_at: Timestamp
    job_id: str
    status: Literal["pending", "submitted", "skipped", "failed"]
    error: FireErrorObject | None


class ScheduleObject(BaseModel):
    schedule_id: str
    tenant: str
    cron: str
    timezone: str
    channel: Literal["task", "query"]
    template: dict[str, Any]
    overlap: Literal["skip", "allow"]
    catch_up: Literal["latest", "none", "all"]
    paused: bool
    next_fire_at: Timestamp | None
    fires: list[FireObject] = Field(description="The last 20, newest first.")
    created_at: Timestamp
    updated_at: Timestamp


class SchedulePage(ListPage):
    items: list[ScheduleObject]
