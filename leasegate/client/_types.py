"""The shapes of the gateway's replies, as TypedDicts over plain JSON dicts."""

from __future__ import annotations

from typing import Any, Generic, NotRequired, TypedDict, TypeVar

JSONObject = dict[str, Any]

T = TypeVar("T")


class Page(TypedDict, Generic[T]):
    """A list reply: ``items`` (newest first), ``total``, ``limit``, ``offset``."""

    items: list[T]
    total: int
    limit: int
    offset: int


class TaskSubmitted(TypedDict):
    """Reply of ``POST /v1/tasks``; ``created`` is False for a replay of the same id."""

    task_id: str
    status: str
    created: bool
    site_paused: NotRequired[bool]  # true when the site is paused (the task waits queued)


class QuerySubmitted(TypedDict):
    """Reply of ``POST /v1/queries``; ``created`` is False for a replay of the same id."""

    query_id: str
    status: str
    created: bool
    site_paused: NotRequired[bool]  # true when the site is paused (the query waits queued)


class Task(TypedDict):
    """A task object. Timestamps are ISO 8601 UTC strings (``2026-11-30T08:00:00Z``)."""

    task_id: str
    tenant: str
    site: str
    account: str
    kind: str
    params: JSONObject
    priority: int
    status: str
    device_id: str | None
    batch_total: int | None
    progress: JSONObject | None
    lease_owner: str | None
    lease_expires_at: str | None
    attempts: int
    cancel_requested: bool
    pause_requested: bool
    created_at: str
    updated_at: str
    started_at: str | None
    completed_at: str | None
    result: Any
    error: JSONObject | None
    stale_reason: str | None
    reclaim: JSONObject | None
    billing: JSONObject | None
    errors: list[JSONObject]  # each attempt's: attempt, at, worker_id, code, type, message…


class Query(TypedDict):
    """A query object. Timestamps are ISO 8601 UTC strings."""

    query_id: str
    tenant: str
    site: str
    kind: str
    params: JSONObject
    status: str
    lease_owner: str | None
    lease_expires_at: str | None
    attempts: int
    created_at: str
    updated_at: str
    completed_at: str | None
    result: Any
    error: JSONObject | None
    billing: JSONObject | None
    max_attempts: int | None
    next_attempt_at: str | None  # waiting for a retry (queued) until then
    errors: list[JSONObject]  # the last 20 attempts' errors, oldest first


class Account(TypedDict):
    """A ledger account: ``available`` can be spent now, ``held`` sits in open holds,
    ``balance`` is both. Amounts are integers in minor units."""

    account: str
    available: int
    held: int
    balance: int


class Entry(TypedDict):
    """A journal line of an account; ``amount`` is signed, for this account."""

    txn_id: int
    kind: str
    amount: int
    ref: str
    memo: str | None
    created_at: str


class DeviceHeartbeat(TypedDict):
    """Reply of a device heartbeat: ``resumed`` counts the paused tasks put back in line."""

    device_id: str
    state: str
    resumed: int


TASK_DONE_STATES = frozenset({"succeeded", "failed", "canceled", "expired", "stale", "paused"})
"""Where :meth:`Client.wait_task` stops: terminal, or waiting for a human or a resume."""

QUERY_DONE_STATES = frozenset({"succeeded", "failed", "expired"})
