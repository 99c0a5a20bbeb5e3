# Generated from /openapi.json by scripts/sync_types.py: do not edit.
"""The shapes of the gateway's replies, as TypedDicts over plain JSON dicts.

Timestamps are ISO 8601 UTC strings (``2026-11-30T08:00:00Z``).
"""

from __future__ import annotations

from typing import Any, Generic, Literal, NotRequired, TypedDict, TypeVar

JSONObject = dict[str, Any]

T = TypeVar("T")


class TaskSubmitted(TypedDict):
    """Reply of ``POST /v1/tasks``."""

    task_id: str
    status: str
    created: bool
    # true when the site is paused: the job waits queued (left out otherwise).
    site_paused: NotRequired[bool]


class QuerySubmitted(TypedDict):
    """Reply of ``POST /v1/queries``."""

    query_id: str
    status: str
    created: bool
    # true when the site is paused: the job waits queued (left out otherwise).
    site_paused: NotRequired[bool]


class JobError(TypedDict):
    """An object in the replies (``#/components/schemas/JobError``)."""

    code: int | None
    message: str
    type: str | None
    traceback: str | None


class Reclaim(TypedDict):
    """An object in the replies (``#/components/schemas/Reclaim``)."""

    action: str
    reason: str
    by: str
    at: str


class Billing(TypedDict):
    """An object in the replies (``#/components/schemas/Billing``)."""

    max_cost: int | None
    charged: int | None
    refunded: int | None
    hold_status: str | None


class AttemptError(TypedDict):
    """An object in the replies (``#/components/schemas/AttemptError``)."""

    attempt: int
    at: str
    worker_id: str | None
    code: int | None
    type: str | None
    message: str
    traceback: str | None


class Task(TypedDict):
    """Reply of ``GET /v1/tasks/{task_id}``."""

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
    error: JobError | None
    stale_reason: str | None
    reclaim: Reclaim | None
    billing: Billing | None
    late_result: bool
    # The last 20 attempts' errors, oldest first (kept across operator retries).
    errors: list[AttemptError]


class Query(TypedDict):
    """Reply of ``GET /v1/queries/{query_id}``."""

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
    error: JobError | None
    billing: Billing | None
    max_attempts: int | None
    # While the query waits for a retry (queued): when it is leasable again.
    next_attempt_at: str | None
    # The last 20 attempts' errors, oldest first.
    errors: list[AttemptError]


class Account(TypedDict):
    """Reply of ``GET /v1/ledger/accounts/{account}``."""

    account: str
    # What can be spent now.
    available: int
    # What sits in this account's open holds.
    held: int
    # available + held.
    balance: int


class Entry(TypedDict):
    """An item of ``items`` of ``GET /v1/ledger/accounts/{account}/entries``."""

    txn_id: int
    kind: Literal["credit", "hold", "charge", "refund"]
    # Signed, for this account.
    amount: int
    ref: str
    memo: str | None
    created_at: str


class DeviceHeartbeat(TypedDict):
    """Reply of ``POST /v1/devices/{device_id}/heartbeat``."""

    device_id: str
    state: Literal["online"]
    resumed: int


class Page(TypedDict, Generic[T]):
    """A list reply: ``items`` (newest first), ``total``, ``limit``, ``offset``."""

    items: list[T]
    total: int
    limit: int
    offset: int
