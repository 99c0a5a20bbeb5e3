"""What ``/openapi.json`` says each route answers.

A route's reply is declared once: the frozen dataclass the actors answer with (``TaskView``,
``Paged[KeyView]``...), which ``render.to_json`` writes. :func:`reply_schema` describes it
as rendered (:class:`WireSchema`). Declared here, as pydantic models, are only the replies
no dataclass is: the error envelope, the batch replies and ``/health``, built as dicts by
their routes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema
from quart_schema import document_response

from leasegate.actors.queries.views import QuerySubmitted, QueryView
from leasegate.actors.tasks.views import Started, TaskSubmitted, TaskView

REF_TEMPLATE = "#/components/schemas/{model}"
# Fields a reply leaves out when false (``batches.receipt``): all the others are written.
LEFT_OUT_WHEN_FALSE = frozenset({"site_paused"})


class WireSchema(GenerateJsonSchema):
    """pydantic's JSON Schema of a reply, as ``to_json`` writes it: every field of a
    dataclass is written, its default too (so no field has a default but those of
    :data:`LEFT_OUT_WHEN_FALSE`); a class's docstring is for its readers here, not for
    the document (which says of a class what its ``json_schema_extra`` says, if
    anything)."""

    def dataclass_args_schema(self, schema: core_schema.DataclassArgsSchema) -> JsonSchemaValue:
        fields = [(field["name"], field["name"] not in LEFT_OUT_WHEN_FALSE, field)
                  for field in schema["fields"] if self.field_is_present(field)]
        json_schema = self._named_required_fields_schema(fields)
        for name, field in json_schema["properties"].items():
            if name not in LEFT_OUT_WHEN_FALSE:
                field.pop("default", None)
        return json_schema

    def dataclass_schema(self, schema: core_schema.DataclassSchema) -> JsonSchemaValue:
        json_schema = super().dataclass_schema(schema)
        if json_schema.get("description") == inspect.cleandoc(schema["cls"].__doc__ or ""):
            del json_schema["description"]
        return json_schema


def reply_schema(reply: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The schema of ``reply`` (a dataclass or a model) and the definitions it refers to
    (under ``#/components/schemas/``)."""
    schema = TypeAdapter(reply).json_schema(ref_template=REF_TEMPLATE, mode="serialization",
                                            schema_generator=WireSchema)
    return schema, schema.pop("$defs", {})


F = TypeVar("F", bound=Callable[..., Any])


def answers(reply: Any, *refusals: int, status: int = 200) -> Callable[[F], F]:
    """A route's answers in the document: ``reply`` (None: no body of its own) at
    ``status``, and the error envelope at each of ``refusals``, the statuses particular
    to the route (those any route may answer are the document's own)."""
    def document(view: F) -> F:
        for refusal in refusals:
            view = document_response(ErrorEnvelope, refusal)(view)
        return view if reply is None else document_response(reply, status)(view)
    return document


class ErrorInfo(BaseModel):
    code: int
    type: str
    message: str


class ErrorEnvelope(BaseModel):
    error: ErrorInfo


class BatchItem(BaseModel):
    status: int = Field(description="The HTTP status this item would have had alone.")
    error: ErrorInfo | None = Field(default=None, description="When the item was refused.")


class TaskSubmittedItem(BatchItem):
    task: TaskSubmitted | None = None


class QuerySubmittedItem(BatchItem):
    query: QuerySubmitted | None = None


class StartedItem(BatchItem):
    task: Started | None = None


class TaskItem(BatchItem):
    task: TaskView | None = None


class QueryItem(BatchItem):
    query: QueryView | None = None


class TasksSubmitted(BaseModel):
    items: list[TaskSubmittedItem]


class QueriesSubmitted(BaseModel):
    items: list[QuerySubmittedItem]


class TasksStarted(BaseModel):
    items: list[StartedItem]


class TaskItems(BaseModel):
    items: list[TaskItem]


class QueryItems(BaseModel):
    items: list[QueryItem]


class QueuedCounts(BaseModel):
    tasks: int
    queries: int


class HealthChecks(BaseModel):
    """Counts only: the public answer's size never grows with sites or tenants."""

    storage_writable: bool
    stale_tasks: int
    blocked_lanes: int
    sites_without_worker: int
    queued: QueuedCounts
    leased_queries: int
    jobs: int
    failing_jobs: int
    overdue_jobs: int = Field(description="Periodic jobs that have not run for three of "
                              "their intervals (counted from start-up until their first run).")
    draining: bool
    ledger_ok: bool = Field(description="The last ledger audit (at start-up, every "
                            "`ledger_audit_interval`, or on GET /v1/ledger/audit) passed.")
    durable: bool = Field(description="The storage keeps \"durable before acknowledged\"; "
                          "false only when served with `unsafe_durability` (e.g. "
                          "`sqlite_synchronous` OFF or NORMAL). Does not make the status "
                          "`degraded`: it is the operator's standing choice.")


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    checks: HealthChecks
    details: dict[str, Any] | None = Field(
        default=None, description="Admin keys only: blocked lanes (account, task, since), "
        "sites without a worker, queue depths by site (the 20 of each that matter most; "
        "`unlisted`: how many each leaves out; `see_all`: the routes that page through "
        "them), every periodic job, the settings that make the storage not durable.")
