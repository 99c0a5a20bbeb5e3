"""Value types every actor's replies share: instants, JSON payloads, billing, errors.

Replies are frozen dataclasses; the HTTP edge renders them to JSON
(``leasegate.http.server.render``). A field annotated :data:`Instant` is a wall time
in seconds, rendered as an ISO 8601 UTC timestamp::

    @dataclass(frozen=True)
    class Seen:
        worker_id: str
        last_seen_at: Instant          # -> "2026-11-30T08:00:00Z"
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, TypeAlias

from leasegate.actors.payloads import stored_loads


class _InstantMarker:
    def __repr__(self) -> str:
        return "INSTANT"

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        # How /openapi.json (pydantic, reading the replies) describes it: as rendered.
        return {"type": "string"}


INSTANT: Final = _InstantMarker()
Instant: TypeAlias = Annotated[float, INSTANT]
"""Wall-clock seconds (the one clock); an ISO 8601 UTC timestamp on the wire."""

if TYPE_CHECKING:
    JSONValue: TypeAlias = (
        "dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None")
    JSONObject: TypeAlias = "dict[str, JSONValue]"
else:  # what pydantic reads for /openapi.json: any JSON value, any JSON object
    JSONValue = Any
    JSONObject = dict[str, Any]


def loads(text: str | None) -> Any:
    """A stored JSON column back to its value, numbers as they were sent (None stays
    None)."""
    return None if text is None else stored_loads(text)


@dataclass(frozen=True)
class JobError:
    """Why a job failed: the worker's code (if any) and message; the exception's type
    and (bounded) traceback when the worker sent them."""

    code: int | None
    message: str
    type: str | None = None
    traceback: str | None = None


class OfOneJob:
    """A reply about one job, its id under the channel's name (``id_field``:
    ``task_id``): ``job_id`` reads it whatever the channel."""

    id_field: ClassVar[str]

    @property
    def job_id(self) -> str:
        job_id: str = getattr(self, self.id_field)
        return job_id


@dataclass(frozen=True, kw_only=True)
class Receipt:
    """What a request that creates something under an id did (a submit, a hold):
    ``status``, the thing's state; ``created``, False for a replay (nothing changed).
    Each kind of receipt adds the id, under its own name (``task_id``), its one
    positional field. (The wire sorts an object's keys: where the id stands among the
    fields is no part of the API.)"""

    status: str
    created: bool


@dataclass(frozen=True, kw_only=True)
class JobSubmitted(Receipt):
    """A submit's receipt on either channel: a job waits queued on a paused site."""

    site_paused: bool = field(default=False, metadata={"description": (
        "true when the site is paused: the job waits queued (left out otherwise).")})


@dataclass(frozen=True)
class Billing:
    """A job's money: what was held, charged and refunded, and the hold's state."""

    max_cost: int | None
    charged: int | None
    refunded: int | None
    hold_status: str | None


def job_error(row: sqlite3.Row) -> JobError | None:
    if row["error_code"] is None and row["error_message"] is None:
        return None
    return JobError(row["error_code"], row["error_message"] or "", row["error_type"],
                    row["error_traceback"])


def billing(row: sqlite3.Row) -> Billing | None:
    """The ``billing`` of a job as its queue knows it: ``max_cost`` only. What was
    charged and refunded, and the hold's state, are the ledger's (filled in by
    ``leasegate.actors.billing.with_billing``)."""
    if row["max_cost"] is None:
        return None
    return Billing(row["max_cost"], None, None, None)
