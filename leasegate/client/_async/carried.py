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

from leasegate.client._batch import Pending, item_error
from leasegate.client._http import retryable
from leasegate.client._types import JSONObject

if TYPE_CHECKING:
    from leasegate.client._async.worker import AsyncWorker


def carried_items(channel: str, carried: Sequence[Pending]) -> list[JSONObject]:
    """The lease body's ``results``: each result's body, named by its job."""
    key = "task_id" if channel == "tasks" else "query_id"
    return [{key: item.job.id, **{name: value for name, value in item.body.items()
                                  if name != "worker_id"}} for item in carried]


async def carried_answered(worker: AsyncWorker, carried: Sequence[Pending],
                           reply: Any) -> None:
    """Take the lease reply's answers to the results it carried."""
    entries = reply.get("results") if isinstance(reply, Mapping) else None
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
            await worker._send_result(item.job, body)


async def send_alone(worker: AsyncWorker, carried: Sequence[Pending]) -> None:
    """Results whose lease call did not answer them: each sent again on its own."""
    for item in carried:
        await worker._send_result(item.job, item.body)
