"""Request and reply models of the schedules routes (``/openapi.json`` and validation)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from leasegate.actors.schedules.cron import (
    CRON_PATTERN,
    CRON_RULE,
    MAX_CRON,
    is_cron,
    timezone_names,
)
from leasegate.http.models.jobs import (
    Id,
    ListArgs,
    Strict,
    SubmitQueryBody,
    SubmitTaskBody,
)


def _template(body: type[Strict], *without: str) -> type[Strict]:
    """A submit body's model without the fields a template may not carry (each fire
    names its own job, is due at its fire time and sights no end user's device)."""
    fields: dict[str, Any] = {name: (info.annotation, info)
                              for name, info in body.model_fields.items()
                              if name not in without}
    name = body.__name__.replace("Submit", "").replace("Body", "Template")
    return create_model(name, __base__=Strict, __doc__=f"{body.__name__} without "
                        f"{', '.join(without)}.", **fields)


TaskTemplate = _template(SubmitTaskBody, "task_id", "not_before", "device_id")
QueryTemplate = _template(SubmitQueryBody, "query_id")
TEMPLATES: dict[str, type[Strict]] = {"task": TaskTemplate, "query": QueryTemplate}


class PutScheduleBody(Strict):
    # The template of each channel, for the document too (the validator below checks it).
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [
        {"if": {"required": ["channel"], "properties": {"channel": {"const": channel}}},
         "then": {"properties": {"template": model.model_json_schema()}}}
        for channel, model in TEMPLATES.items()]})

    cron: Annotated[str, Field(json_schema_extra={"pattern": CRON_PATTERN,
                                                  "maxLength": MAX_CRON},
                               examples=["0 2 * * 1-5"], description=(
        "Five cron fields (minute hour day-of-month month day-of-week), e.g. "
        "`0 2 * * 1-5`; a range whose start passes its end wraps (`22-2`, `FRI-MON`); a "
        "date no month has (31 February) never fires (`next_fire_at` null)."))]
    timezone: Annotated[str, Field(json_schema_extra={"enum": sorted(timezone_names())},
                                   description="IANA time zone the cron fields are read "
                                               "in.")] = "UTC"
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

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        if not is_cron(value):
            raise ValueError(CRON_RULE)
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        if value not in timezone_names():
            raise ValueError("must be an IANA time zone name, e.g. UTC or Europe/Berlin")
        return value

    @model_validator(mode="after")
    def _template(self) -> PutScheduleBody:
        try:
            TEMPLATES[self.channel].model_validate(self.template)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in ("template", *first["loc"]))
            raise ValueError(f"{where}: {first['msg']}") from None
        return self


class ScheduleListArgs(ListArgs):
    tenant: Id | None = Field(default=None, description=(
        "Only this tenant's schedules (an admin's filter; a client key naming another "
        "tenant is refused)."))
