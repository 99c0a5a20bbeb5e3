"""Python SDK for leasegate: submit work upstream, and run the workers that do it.

A complete worker (the handler is yours; the protocol is done for you)::

    from leasegate.client import Canceled, Failed, HandlerResult, Job, Paused, Worker


    def checkout(account: str | None, item: str) -> str | None:
        raise NotImplementedError  # your code: order one item on the site, return its number


    def place_orders(job: Job) -> HandlerResult:
        items: list[str] = job.params["items"]
        done: int = (job.progress or {}).get("done", 0)  # checkpoint of an earlier run
        orders: list[str] = []
        while done < len(items):
            if job.cancel_requested or job.lease_lost:
                return Canceled(f"stopped after {done} items", result={"orders": orders})
            if job.pause_requested:  # a batch task whose user went away
                return Paused({"done": done})
            order_no = checkout(job.account, items[done])  # runs at most once
            if order_no is None:
                return Failed(f"item {done} refused", result={"orders": orders})
            orders.append(order_no)
            done += 1
            job.set_progress({"done": done})  # sent with the next lease renewal
        job.cost = len(orders)
        return {"orders": orders}  # "succeeded"; an exception would report "failed"


    worker = Worker("http://127.0.0.1:8470", key="lg_...", worker_id="desk-1", sites=["shop"])
    worker.run(place_orders)

Upstream, :class:`Client` (or :class:`AsyncClient`) submits and waits; an id
is generated before the first try, so a retried submit never runs twice::

    with Client("http://127.0.0.1:8470", key="lg_...") as client:
        task = client.submit_task("shop", "place_orders", {"items": [...]}, account="alice")
        print(client.wait_task(task["task_id"], timeout=600)["status"])

:class:`AsyncWorker` and :class:`AsyncClient` are the same under trio or asyncio.
"""

from leasegate.client._async.worker import AsyncWorker
from leasegate.client._clients import AsyncClient, Client
from leasegate.client._errors import (
    ArtifactNotFound,
    DeviceLimit,
    Forbidden,
    IdempotencyConflict,
    InsufficientFunds,
    InternalError,
    InvalidRequest,
    LeasegateError,
    LedgerLimit,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    QueryLeaseInvalid,
    QueryNotFound,
    RateLimited,
    RequestTimeout,
    StateConflict,
    TaskLeaseInvalid,
    TaskNotFound,
    TransportError,
    Unauthorized,
    Unavailable,
)
from leasegate.client._events import EventsReset, JobEvent
from leasegate.client._http import Retry
from leasegate.client._job import (
    AsyncHandler,
    AsyncJob,
    BaseJob,
    Canceled,
    Failed,
    Handler,
    HandlerResult,
    Job,
    Outcome,
    Paused,
    PermanentError,
    Snooze,
)
from leasegate.client._sync.worker import Worker
from leasegate.client._types import (
    Account,
    DeviceHeartbeat,
    Entry,
    Page,
    Query,
    QuerySubmitted,
    Task,
    TaskSubmitted,
)
from leasegate.client._webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "Account",
    "ArtifactNotFound",
    "AsyncClient",
    "AsyncHandler",
    "AsyncJob",
    "AsyncWorker",
    "BaseJob",
    "Canceled",
    "Client",
    "DeviceHeartbeat",
    "DeviceLimit",
    "Entry",
    "EventsReset",
    "Failed",
    "Forbidden",
    "Handler",
    "HandlerResult",
    "IdempotencyConflict",
    "InsufficientFunds",
    "InternalError",
    "InvalidRequest",
    "Job",
    "JobEvent",
    "LeasegateError",
    "LedgerLimit",
    "MethodNotAllowed",
    "NotFound",
    "Outcome",
    "Page",
    "Paused",
    "PayloadTooLarge",
    "PermanentError",
    "Query",
    "QueryLeaseInvalid",
    "QueryNotFound",
    "QuerySubmitted",
    "RateLimited",
    "RequestTimeout",
    "Retry",
    "Snooze",
    "StateConflict",
    "Task",
    "TaskLeaseInvalid",
    "TaskNotFound",
    "TaskSubmitted",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "WebhookVerificationError",
    "Worker",
    "verify_webhook",
]
