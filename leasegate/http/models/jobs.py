"""Request models: validation at the edge and ``/openapi.json``.

Ids are 1–64 characters of ``[A-Za-z0-9._:@-]``; anything else is
400, never truncated. Size limits on JSON fields are checked by the routes
(they answer 413, not 400).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Any, TypedDict

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SkipValidation,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from leasegate.actors.keys.records import Role
from leasegate.actors.pages import Page
from leasegate.actors.queries.reads import QueryStatus
from leasegate.actors.queries.results import MAX_SNOOZE, QueryOutcome
from leasegate.actors.queue.reports import MAX_ERROR_TYPE, MAX_TRACEBACK
from leasegate.actors.queue.search import MAX_SEARCH_TEXT
from leasegate.actors.runtime.batches import MAX_BATCH
from leasegate.actors.tasks.control import ReclaimAction
from leasegate.actors.tasks.fenced import TaskOutcome
from leasegate.actors.tasks.reads import TaskStatus
from leasegate.http.models.numbers import ASCII_DIGITS, INTEGRAL
from leasegate.http.models.payloads import MAX_JSON_DEPTH
from leasegate.ids import ID_PATTERN, RESERVED_JOB_IDS
from leasegate.settings import MAX_AMOUNT, MAX_QUERY_ATTEMPTS

# pydantic's patterns are Rust regexes, where "$" matches only at the very end
# (never before a trailing newline), so ID_PATTERN is whole-string here too.
Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
# Integers are bounded at the edge: SQLite stores 64-bit integers and raises
# OverflowError past them (which would take an actor, and the process, down). In a
# JSON body they are values, as JSON Schema says: 100.0 and 1e2 are 100, while true,
# "100" and 100.5 are not integers (numbers.INTEGRAL).
Amount = Annotated[StrictInt, Field(ge=0, le=MAX_AMOUNT), INTEGRAL]  # minor units
Count = Annotated[StrictInt, Field(gt=0, le=2**31 - 1), INTEGRAL]
Code = Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1), INTEGRAL]
Seconds = Annotated[StrictFloat, Field(ge=0, le=30)]  # an integer is a number too
Offset = Annotated[int, Field(ge=0, le=2**31 - 1), ASCII_DIGITS]  # in a query string
Text = Annotated[str, StringConstraints(max_length=4096)]
# A caller's JSON that is stored and handed back as sent (params, result, progress):
# what the routes check it by (``models.payloads.check_json_field``), for the document.
PAYLOAD = (f"Stored and handed back. Objects and arrays nest at most {MAX_JSON_DEPTH} "
           "levels deep, this one counted (deeper: 400); at most "
           "`max_json_field_bytes` of JSON (64 KiB by default; more: 413). Text in it "
           "may hold NUL.")
# A client-chosen task or query id: an id that does not name a route.
JobId = Annotated[Id, Field(json_schema_extra={"not": {"enum": list(RESERVED_JOB_IDS)}})]

_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:(?P<second>\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)")


def _rfc3339(value: object) -> datetime:
    """What ``format: date-time`` says, and only that: RFC 3339 text with its offset
    (pydantic alone would also take a number as Unix time, or a bare date)."""
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError("must be an RFC 3339 date-time with its offset, e.g. "
                         "2026-12-01T08:00:00Z")
    text = match[0].upper()
    leap = match["second"] == "60"  # 23:59:60, a leap second: the next second
    when = datetime.fromisoformat(text[:17] + "59" + text[19:] if leap else text)
    return when + timedelta(seconds=1) if leap else when


DateTime = Annotated[datetime, BeforeValidator(_rfc3339),
                     Field(description="RFC 3339, with its offset (`Z` for UTC).")]


def _object(value: object) -> object:
    if not isinstance(value, dict):
        raise ValueError("each item must be a JSON object")
    return value


NUL_REFUSED = "text must not contain NUL (\\u0000)"
# The rule above in a schema's words (ECMA-262, as JSON Schema's patterns are).
NO_NUL_PATTERN = r"^[^\x00]*$"
# String schemas that already say what they take (NUL excluded).
_SAID = ("pattern", "enum", "const", "format")


def _say_no_nul(schema: dict[str, Any]) -> None:
    """Give every free-text string in a field's ``schema`` the NUL-free pattern (in
    place; another model, a ``$ref``, says its own)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if node.get("type") == "string" and not any(key in node for key in _SAID):
            node["pattern"] = NO_NUL_PATTERN
        stack.extend(node.get("anyOf", ()))
        if isinstance(node.get("items"), dict):
            stack.append(node["items"])


class Strict(BaseModel):
    """Unknown fields are an error: a typo must not be silently ignored. No text may
    hold NUL (``\\u0000``): PostgreSQL cannot store it, so it is a 400 on both engines
    (inside a JSON field such as ``params`` it is stored escaped, and allowed); the
    document says so with a pattern on each such field."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        for field in handler.resolve_ref_schema(schema).get("properties", {}).values():
            _say_no_nul(field)
        return schema

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if type(value) is str:
            if "\x00" in value:
                raise ValueError(NUL_REFUSED)
        elif type(value) is list and any(type(v) is str and "\x00" in v for v in value):
            raise ValueError(NUL_REFUSED)
        return value


# ---- requests -----------------------------------------------------------------------

class SubmitQueryBody(Strict):
    query_id: JobId | None = None
    site: Id
    kind: Id
    params: dict[str, Any] = Field(default_factory=dict, description=PAYLOAD)
    max_cost: Amount | None = None
    max_attempts: Annotated[StrictInt, Field(
        ge=1, le=MAX_QUERY_ATTEMPTS, description="Attempts (failed results and lapsed "
        "leases) before the query fails; default: the query_max_attempts setting."),
        INTEGRAL] | None = None


class SubmitTaskBody(Strict):
    task_id: JobId | None = None
    site: Id
    account: Id = "-"
    kind: Id
    params: dict[str, Any] = Field(default_factory=dict, description=PAYLOAD)
    priority: Annotated[StrictInt, Field(ge=0, le=9), INTEGRAL] = 0
    not_before: DateTime | None = None
    device_id: Id | None = None
    batch_total: Count | None = None
    max_cost: Amount | None = None


class LeaseBody(Strict):
    worker_id: Id
    wait_seconds: Seconds = 20
    sites: Annotated[list[Id], Field(min_length=1, max_length=100)] | None = None
    max: Annotated[StrictInt, Field(ge=1, le=MAX_BATCH), INTEGRAL] = 1
    request_id: Id | None = None


class ErrorBody(Strict):
    code: Code | None = None
    message: Text = ""
    type: Annotated[str, StringConstraints(min_length=1, max_length=MAX_ERROR_TYPE),
                    Field(description="The exception's type, e.g. `KeyError` or "
                                      "`shop.errors.OutOfStock`.")] | None = None
    traceback: Annotated[str, StringConstraints(max_length=MAX_TRACEBACK),
                         Field(description="Where it was raised: at most 8,192 "
                                           "characters (the SDK cuts a longer one at "
                                           "a line and says so).")] | None = None


class ReportedError(TypedDict):
    """A worker's error as the actors' result messages take it."""
    error_code: int | None
    error_message: str | None
    error_type: str | None
    error_traceback: str | None


def reported_error(error: ErrorBody | None) -> ReportedError:
    """The error a result reports, or none (each field None)."""
    if error is None:
        return {"error_code": None, "error_message": None, "error_type": None,
                "error_traceback": None}
    return {"error_code": error.code, "error_message": error.message,
            "error_type": error.type, "error_traceback": error.traceback}


class QueryErrorBody(ErrorBody):
    retryable: StrictBool = Field(True, description=(
        "false: the query fails now, whatever attempts it has left (a permanent error)."))


SnoozeSeconds = Annotated[StrictInt, Field(ge=1, le=MAX_SNOOZE, description=(
    "With outcome `snoozed`: the query is queued again after this long, its attempt "
    "not spent.")), INTEGRAL]


# A snooze names its wait; no other outcome takes one (the document says so as well).
SNOOZE_RULE = ConfigDict(extra="forbid", json_schema_extra={"allOf": [
    {"if": {"required": ["outcome"], "properties": {"outcome": {"const": "snoozed"}}},
     "then": {"required": ["snooze_seconds"],
              "properties": {"snooze_seconds": {"type": "integer"}}},
     "else": {"properties": {"snooze_seconds": {"type": "null"}}}}]})


Token = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class FencedBody(Strict):
    worker_id: Id
    lease_token: Token


# A result's outcome fields are written once per channel and serve the single result
# and the batch item alike. Each of those lists its fence (the worker's or the job's id,
# and the token) as the last base: pydantic orders fields from the last base to the
# first, so the fence stays first in the body and in the document.
class QueryOutcomeBody(Strict):
    model_config = SNOOZE_RULE

    outcome: QueryOutcome
    result: Any = Field(default=None, description=PAYLOAD)
    error: QueryErrorBody | None = None
    cost: Amount | None = None
    snooze_seconds: SnoozeSeconds | None = None


class QueryResultBody(QueryOutcomeBody, FencedBody):
    pass


class TaskOutcomeBody(Strict):
    outcome: TaskOutcome
    result: Any = Field(default=None, description=PAYLOAD)
    error: ErrorBody | None = None
    cost: Amount | None = None
    progress: dict[str, Any] | None = Field(default=None, description=PAYLOAD)


class RenewBody(FencedBody):
    progress: dict[str, Any] | None = Field(default=None, description=PAYLOAD)


class TaskResultBody(TaskOutcomeBody, FencedBody):
    pass


# ---- batches: the envelope is checked here (1..100 objects); each item on its own by
# the route, with the single route's model, so a bad item is that item's 400 alone.

def batch_of(item: Any) -> Any:
    """``items``: 1..100 JSON objects, each meant to be an ``item`` but validated as one
    by the route (a non-object is the whole call's 400). The document says both: an
    ``item``, or any object (answered with its own 400)."""

    def document(schema: dict[str, Any]) -> None:
        for field in schema["items"].get("properties", {}).values():  # inlined: as Strict
            _say_no_nul(field)
        schema["items"] = {
            "anyOf": [schema["items"], {"type": "object"}],
            "description": f"A {item.__name__}. An object that breaks its rules is refused "
                           "on its own (its entry's status 400); the others go ahead."}

    return Annotated[list[Annotated[SkipValidation[item], BeforeValidator(_object)]],
                     Field(min_length=1, max_length=MAX_BATCH, json_schema_extra=document)]


class SubmitTasksBody(Strict):
    items: batch_of(SubmitTaskBody)  # type: ignore[valid-type]


class SubmitQueriesBody(Strict):
    items: batch_of(SubmitQueryBody)  # type: ignore[valid-type]


class StartItem(Strict):
    task_id: Id
    lease_token: Token


class StartTasksBody(Strict):
    worker_id: Id
    items: batch_of(StartItem)  # type: ignore[valid-type]


class TaskResultItem(TaskOutcomeBody, StartItem):  # StartItem: the task and its token
    pass


class TaskResultsBody(Strict):
    worker_id: Id
    items: batch_of(TaskResultItem)  # type: ignore[valid-type]


class QueryFence(Strict):
    query_id: Id
    lease_token: Token


class QueryResultItem(QueryOutcomeBody, QueryFence):
    pass


class QueryResultsBody(Strict):
    worker_id: Id
    items: batch_of(QueryResultItem)  # type: ignore[valid-type]


class ReclaimBody(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [
        {"if": {"required": ["action"], "properties": {"action": {"const": "requeue"}}},
         "then": {"properties": {"result": {"type": "null"}, "cost": {"type": "null"}}}}]})

    action: ReclaimAction
    reason: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    result: Any = Field(default=None, description=PAYLOAD)
    cost: Amount | None = None


class CreateKeyBody(Strict):
    """A new key (HTTP and ``leasegate keys create`` alike)."""

    # The validator's rules, for the document too.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [
        {"if": {"required": ["role"], "properties": {"role": {"const": "client"}}},
         "then": {"required": ["tenant"], "properties": {"tenant": {"type": "string"}}}},
        {"if": {"required": ["role"], "properties": {"role": {"enum": ["admin", "client"]}}},
         "then": {"properties": {"sites": {"type": "null"}}}}]})

    role: Role
    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    tenant: Id | None = None
    sites: Annotated[list[Id], Field(min_length=1, max_length=100)] | None = None

    @model_validator(mode="after")
    def _bound_as_its_role_needs(self) -> CreateKeyBody:
        if self.role == "client" and self.tenant is None:
            raise ValueError("a client key needs a tenant")
        if self.role != "worker" and self.sites is not None:
            raise ValueError("sites are for worker keys")
        return self


class ListArgs(Strict):
    limit: Annotated[int, Field(ge=1, le=500), ASCII_DIGITS] = Field(
        50, description="At most this many items in the page (1–500).")
    offset: Offset = Field(0, description="Skip this many items first (the next page).")


def page(args: ListArgs) -> Page:
    return Page(limit=args.limit, offset=args.offset)


class WaitArgs(Strict):
    wait_seconds: Annotated[float, Field(ge=0, le=30)] | None = Field(
        default=None, description="Long-poll: hold the answer up to this many seconds "
                                  "(0–30) until the job is done; none: answer at once.")


class TaskSiteArgs(ListArgs):
    unserved: bool = Field(default=False, description="Only sites no online worker serves.")


# The query string of a job search (``GET /v1/tasks``, ``GET /v1/queries``; the console's
# lists read it the same way).
class SearchArgs(ListArgs):
    """The search both channels share; every filter given must match. Anything else
    in the query string is a 400."""

    site: Id | None = Field(default=None, description="Only jobs of this site.")
    kind: Id | None = Field(default=None, description="Only jobs of this kind.")
    tenant: Id | None = Field(default=None, description=(
        "Admin: that tenant's jobs. A client sees its own tenant's only (another "
        "tenant: an empty page)."))
    worker: Id | None = Field(default=None, description="The worker of the last lease.")
    id_prefix: Id | None = Field(default=None, description="Ids that start with this.")
    since: DateTime | None = Field(default=None, description="Created at or after.")
    until: DateTime | None = Field(default=None, description="Created before.")
    text: Annotated[str, StringConstraints(min_length=1, max_length=MAX_SEARCH_TEXT,
                                           pattern=NO_NUL_PATTERN)] | None = Field(
        default=None, description=(
            "Text inside the params or the error (message or type), ASCII letters in "
            "either case. Reads at most the newest 10,000 jobs that match the other "
            "filters: the reply's `searched` says how many it read and whether that "
            "was all of them."))


class QueryListArgs(SearchArgs):
    status: QueryStatus | None = Field(default=None, description="Only queries in this "
                                                                 "status.")


class TaskListArgs(SearchArgs):
    status: TaskStatus | None = Field(default=None, description="Only tasks in this status.")
    account: Id | None = Field(default=None, description="Only tasks of this account.")
