# Generated from leasegate/client/_async/carried.py by scripts/sync_sdk.py: do not edit.
"""Results carried by the next lease call: a worker that leases again right after its
jobs end sends their results in that call (``results``) instead of a results call of
their own, so a busy worker makes one request per lease call (tasks: and one start
call). Nothing waits for it: a result is carried only when the lease call follows at
once (every job of the lease call has ended, and the worker goes on); otherwise it
goes out as before, within ``linger``.

The gateway answers each carried result on its own, as the results route does; a
result it refused is handled as a refused single result, one it did not take (a
retryable error, an unreadable answer, a lease call that failed or was stopped) is
sent again alone, which the gateway answers as a retry of the same result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from leasegate.client._batch import MAX_BATCH, Pending, item_error
from leasegate.client._errors import LeasegateError
from leasegate.client._http import path, retryable
from leasegate.client._types import JSONObject

if TYPE_CHECKING:
    from leasegate.client._sync.worker import Worker


def carried_items(channel: str, carried: Sequence[Pending]) -> list[JSONObject]:
    """The lease body's ``results``: each result's body, named by its job."""
    key = "task_id" if channel == "tasks" else "query_id"
    return [{key: item.job.id, **{name: value for name, value in item.body.items()
                                  if name != "worker_id"}} for item in carried]


def carried_answered(worker: Worker, carried: Sequence[Pending], reply: Any,
                           field: str = "results") -> None:
    """Take the answers to the results a call carried (a lease reply's ``results``, a
    results reply's ``items``)."""
    entries = reply.get(field) if isinstance(reply, Mapping) else None
    if not isinstance(entries, list) or len(entries) != len(carried):
        entries = [{"status": 0}] * len(carried)  # unreadable: each is sent again
    for item, entry in zip(carried, entries, strict=True):
        status = entry.get("status", 0) if isinstance(entry, Mapping) else 0
        if isinstance(status, int) and 200 <= status < 300:
            continue
        error = item_error(entry if isinstance(entry, Mapping) else {})
        body: JSONObject | None = item.body
        if not retryable(error) and error.status != 0:
            body = worker._retry_refused(item.job, item.body, error, 1)
        if body is not None:
            worker._send_result(item.job, body)


def send_alone(worker: Worker, carried: Sequence[Pending]) -> None:
    """Results whose lease call did not answer them (stopped, failed): sent again in
    results calls of their own (each a retry if it had arrived), item by item only if
    such a call is refused as a whole."""
    for start in range(0, len(carried), MAX_BATCH):
        chunk = carried[start:start + MAX_BATCH]
        body = {"worker_id": worker.worker_id, "items": carried_items(worker.channel, chunk)}
        try:
            reply = worker._http.call("POST", path(worker.channel, "results"),
                                            json=body, forever=True)
        except LeasegateError:
            for item in chunk:
                worker._send_result(item.job, item.body)
            continue
        except Exception:
            worker._report_crashed(chunk[0].job)
            continue
        carried_answered(worker, chunk, reply, "items")
