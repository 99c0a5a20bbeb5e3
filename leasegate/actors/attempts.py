"""A job's ``errors``: the error of each of its last attempts, on both channels.

They are kept in the job's row as one JSON list (``errors``), oldest first, at most
:data:`MAX_ERRORS`: a query's failed attempts before it is retried (or fails for good),
a task's across the operator retries that start it again. An entry is written with the
change that ends its attempt, in the same statement, so it is as durable as the
outcome::

    errors = with_error(row["errors"], AttemptError(2, now, "w1", 7, "KeyError", "...", None))
    attempt_errors(row["errors"])       # -> (AttemptError, ...) for the job's view
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Final

from leasegate.actors.payloads import compact_json
from leasegate.actors.views import Instant
from leasegate.storage.engine import Row

MAX_ERRORS: Final = 20
"""The attempts a job keeps the errors of (the latest)."""


@dataclass(frozen=True)
class AttemptError:
    """Why one attempt of a job ended without its result: its number, when, the worker
    that held it, and the worker's error (or the gateway's, for a lapsed lease)."""

    attempt: int
    at: Instant
    worker_id: str | None
    code: int | None
    type: str | None
    message: str
    traceback: str | None


def attempt_errors(text: str | None) -> tuple[AttemptError, ...]:
    """The errors a job's row keeps (``errors``), oldest first."""
    if text is None:
        return ()
    return tuple(AttemptError(**entry) for entry in json.loads(text))


def with_error(text: str | None, error: AttemptError) -> str:
    """The row's ``errors`` with ``error`` added as the latest (the oldest dropped past
    :data:`MAX_ERRORS`)."""
    kept = [] if text is None else json.loads(text)
    kept.append(dataclasses.asdict(error))
    return compact_json(kept[-MAX_ERRORS:])


def outcome_error(row: Row) -> AttemptError | None:
    """The error a finished job's row holds (``error_*``) as its last attempt's, or None:
    a task's, which an operator's retry moves into its ``errors``."""
    if row["error_code"] is None and row["error_message"] is None:
        return None
    return AttemptError(row["attempts"], row["completed_at"] or row["updated_at"],
                        row["lease_owner"], row["error_code"], row["error_type"],
                        row["error_message"] or "", row["error_traceback"])
