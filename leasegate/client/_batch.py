"""Batches: the bookkeeping both clients and both workers share, without any I/O.

- :func:`chunks`, :func:`item_error`, :func:`submitted`: ``submit_many_*`` sends
  up to 100 submits a call and gives back, per item, the reply or the error;
- :class:`Outbox`: a worker's finished results waiting to go out in one
  ``POST /v1/<channel>/results``. A result waits at most ``linger`` seconds for
  company, never past its lease (less a margin), and not at all once every job
  of the lease call has ended; what the gateway answers for each item decides
  that item alone (done, sent again after a retry pause, or given up, logged,
  exactly as a single result would be).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from leasegate.client._errors import ERRORS_BY_CODE, LeasegateError
from leasegate.client._http import Retry, encode_json, retryable
from leasegate.client._job import BaseJob, Channel
from leasegate.client._types import JSONObject

MAX_BATCH: Final = 100
"""The most items the gateway takes in one batch call."""
DEFAULT_LINGER: Final = 0.02
"""How long a finished result waits for others to share its call (seconds)."""
LEASE_MARGIN: Final = 2.0
"""A result is sent at the latest this long before its lease runs out."""
BATCH_BYTES: Final = 512 * 1024
"""A results call carries about this much JSON at most (the gateway's default body
limit is 1 MiB); a bigger result goes in a call of its own."""

T = TypeVar("T")


def chunks(items: Sequence[T], size: int = MAX_BATCH) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def item_error(entry: Mapping[str, Any]) -> LeasegateError:
    """The exception for a batch reply's error entry (as for a whole reply)."""
    error = entry.get("error") or {}
    try:
        code, type_, message = int(error["code"]), str(error["type"]), str(error["message"])
    except (KeyError, TypeError, ValueError):
        return LeasegateError(int(entry.get("status", 0)), 0, "http_error", repr(entry)[:200])
    return ERRORS_BY_CODE.get(code, LeasegateError)(int(entry["status"]), code, type_, message)


def submitted(reply: Any, noun: str, count: int) -> list[Any]:
    """Per item of a batch submit's reply: the ``noun`` object, or its error."""
    entries = reply.get("items") if isinstance(reply, Mapping) else None
    if not isinstance(entries, list) or len(entries) != count:
        raise LeasegateError(200, 0, "invalid_response",
                             f"not {count} answers to a batch of {count}: {reply!r:.200}")
    return [entry[noun] if isinstance(entry, Mapping) and noun in entry
            else item_error(entry if isinstance(entry, Mapping) else {}) for entry in entries]


@dataclass
class Pending:
    """A result on its way: the job, the body to send, the tries so far, and when it
    may (``ready_at``) and must (``due_at``) go, on the worker's monotonic clock."""

    job: BaseJob
    body: JSONObject
    ready_at: float
    due_at: float
    tried: int = 0  # answers so far (the retry pause grows with them)
    refusals: int = 0  # answers not retried (the single result's count: slim once)
    size: int = 0


class Outbox:
    """A lease call's results, gathered for ``POST /v1/<channel>/results``.

    Not thread-safe on its own: the sync worker holds its lock around every call.
    """

    def __init__(self, channel: Channel, worker_id: str, size: int, linger: float,
                 retry: Retry, jobs: int) -> None:
        self.channel: Channel = channel
        self.worker_id = worker_id
        self.size = size
        self.linger = linger
        self.retry = retry
        self.running = jobs  # jobs that may still put a result here
        self.pending: list[Pending] = []

    def put(self, job: BaseJob, body: JSONObject, now: float) -> None:
        """A job's first result (``now``: the worker's monotonic clock, as the job's
        ``_due_by``, its lease's end when known)."""
        due = now + self.linger
        if job._due_by is not None:
            due = min(due, job._due_by - LEASE_MARGIN)
        self.pending.append(Pending(job, body, now, due, size=_size(body)))
        self.ended()

    def ended(self) -> None:
        """A job ended (with a result put here, or with none to send)."""
        self.running -= 1

    def next_batch(self, now: float) -> list[Pending] | None:
        """The results to send now, taken out; None if none is due yet."""
        ready = [p for p in self.pending if p.ready_at <= now]
        if not ready:
            return None
        if not (len(ready) >= self.size or self.running <= 0
                or any(p.due_at <= now for p in ready)):
            return None
        batch: list[Pending] = []
        total = 0
        for item in ready:
            if batch and (len(batch) >= self.size or total + item.size > BATCH_BYTES):
                break
            batch.append(item)
            total += item.size
        taken = {id(item) for item in batch}
        self.pending = [p for p in self.pending if id(p) not in taken]
        return batch

    def wake_at(self) -> float | None:
        """When :meth:`next_batch` may next have something (None: nothing pending)."""
        if not self.pending:
            return None
        return min(max(p.ready_at, p.due_at) if self.running > 0 else p.ready_at
                   for p in self.pending)

    def request(self, batch: Sequence[Pending]) -> JSONObject:
        key = "task_id" if self.channel == "tasks" else "query_id"
        items = []
        for item in batch:
            body = {name: value for name, value in item.body.items() if name != "worker_id"}
            items.append({key: item.job.id, **body})
        return {"worker_id": self.worker_id, "items": items}

    def answered(self, batch: Sequence[Pending], reply: Any, now: float,
                 refused: Callable[[BaseJob, JSONObject, LeasegateError, int],
                                   JSONObject | None]) -> None:
        """Take the gateway's answer for ``batch``: an item answered 2xx is done; a
        retryable error puts it back after the retry pause; another goes to ``refused``
        (the worker's decision for a refused result: a slimmed body to send once more,
        or None: given up, logged)."""
        entries = reply.get("items") if isinstance(reply, Mapping) else None
        if not isinstance(entries, list) or len(entries) != len(batch):
            entries = [{"status": 0}] * len(batch)  # unreadable: each is an http_error
        for item, entry in zip(batch, entries, strict=True):
            item.tried += 1
            if 200 <= int(entry.get("status", 0)) < 300:
                continue
            error = item_error(entry)
            if retryable(error):
                item.ready_at = item.due_at = now + self.retry.delay(item.tried,
                                                                     error.retry_after)
                self.pending.append(item)
                continue
            item.refusals += 1
            body = refused(item.job, item.body, error, item.refusals)
            if body is not None:
                item.body, item.size = body, _size(body)
                item.ready_at = item.due_at = now
                self.pending.append(item)


def _size(body: JSONObject) -> int:
    """About the bytes ``body`` adds to a results call: as it is sent (orjson writes a
    checked result several times faster than the stdlib did)."""
    try:
        return len(encode_json(body))
    except (TypeError, ValueError):
        return BATCH_BYTES
