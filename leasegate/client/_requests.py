"""What both clients send and decide without I/O: request bodies, long-poll lengths."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from leasegate.client._http import new_id
from leasegate.client._types import JSONObject, Task

MAX_WAIT_SECONDS: Final = 30
"""The longest long-poll the gateway holds (``wait_seconds`` 0–30)."""

_V = TypeVar("_V")


def iso(moment: datetime | str) -> str:
    """An API timestamp (UTC, whole seconds, ``Z``); a naive datetime is taken as UTC."""
    if isinstance(moment, str):
        return moment
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def given(**fields: _V | None) -> dict[str, _V]:
    """The ``fields`` that are not None (of a request body, or a list's filters)."""
    return {name: value for name, value in fields.items() if value is not None}


def task_body(
    site: str,
    kind: str,
    params: JSONObject,
    task_id: str | None,
    account: str | None,
    priority: int | None,
    not_before: datetime | str | None,
    device_id: str | None,
    batch_total: int | None,
    max_cost: int | None,
) -> JSONObject:
    return given(
        task_id=task_id or new_id(),
        site=site,
        account=account,
        kind=kind,
        params=params,
        priority=priority,
        not_before=None if not_before is None else iso(not_before),
        device_id=device_id,
        batch_total=batch_total,
        max_cost=max_cost,
    )


def query_body(
    site: str, kind: str, params: JSONObject, query_id: str | None, max_cost: int | None,
    max_attempts: int | None = None,
) -> JSONObject:
    return given(
        query_id=query_id or new_id(), site=site, kind=kind, params=params, max_cost=max_cost,
        max_attempts=max_attempts,
    )


_TASK_DEFAULTS: Final[dict[str, Any]] = dict.fromkeys(
    ("task_id", "account", "priority", "not_before", "device_id", "batch_total", "max_cost"))


def many_bodies(items: Iterable[Mapping[str, Any]], noun: str) -> list[JSONObject]:
    """The bodies of a ``submit_many_*`` (each a dict of the single submit's keyword
    arguments, ``params`` optional); a key the single submit does not take is a
    TypeError, before anything is sent."""
    if noun == "task":
        return [task_body(**{"params": {}, **_TASK_DEFAULTS, **item}) for item in items]
    return [query_body(**{"params": {}, "query_id": None, "max_cost": None, **item})
            for item in items]


def long_poll_seconds(remaining: float | None) -> int:
    """The ``wait_seconds`` of the next long-poll: up to 30, at least 1."""
    if remaining is None:
        return MAX_WAIT_SECONDS
    return max(1, min(MAX_WAIT_SECONDS, math.ceil(remaining)))


def timed_out(what: str, item_id: str, status: str, timeout: float | None) -> TimeoutError:
    return TimeoutError(f"{what} {item_id} is still {status} after {timeout}s")


def cancel_took_effect(task: Task) -> bool:
    """A cancel whose first answer was lost did what it asked (a retry met 6003)."""
    return task["status"] == "canceled" or task["cancel_requested"]
