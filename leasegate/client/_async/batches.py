"""A lease call's jobs with ``batch``: the tasks started in one call, the results sent
together (the outbox's decisions are in ``_batch``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from leasegate.client._async.backend import TaskGroup, Wakeup, current_time, run_each
from leasegate.client._async.http import AsyncHTTP
from leasegate.client._async.renewals import Renewals
from leasegate.client._batch import Outbox, Pending, submitted
from leasegate.client._errors import LeasegateError, TransportError
from leasegate.client._http import path
from leasegate.client._job import AsyncHandler, AsyncJob, HandlerResult
from leasegate.client._protocol import Lease

if TYPE_CHECKING:
    from leasegate.client._async.worker import AsyncWorker, Start

log = logging.getLogger("leasegate.client")


class BatchedCall:
    """The jobs of one lease call, started together (tasks) and reported together: each
    ending goes into the outbox, and a sender (a task; ``Worker``: a thread) sends the
    results as they fall due. The outbox is changed only inside ``with self._changed``
    (a lock for threads)."""

    def __init__(self, worker: AsyncWorker, http: AsyncHTTP, renewals: Renewals,
                 leases: Sequence[Lease], server_time: float | None) -> None:
        self._worker = worker
        self._http = http
        self._renewals = renewals
        self._leases = leases
        self._server_time = server_time
        self._channel = worker.channel
        self._outbox = Outbox(worker.channel, worker.worker_id, worker.batch, worker.linger,
                              worker._retry, len(leases))
        self._changed = Wakeup()

    async def run(self, group: TaskGroup, handler: AsyncHandler, handled: list[int]) -> None:
        """Start the tasks, run every handler at once (``handled``: a 1 for each that ran),
        and leave the sender in ``group`` until every result is answered."""
        group.start_soon(self._send_results, name=f"results {self._worker.worker_id}")

        async def handle(item: tuple[Lease, Start | None]) -> None:
            lease, start = item
            reported = False

            async def into_outbox(job: AsyncJob, ending: HandlerResult | Exception) -> None:
                nonlocal reported
                reported = True
                self._put(job, ending)

            try:
                handled.append(await self._worker._handle(
                    lease, handler, self._renewals, into_outbox, start, self._server_time))
            finally:
                if not reported:  # ended with no result to send: none is waited for
                    with self._changed:
                        self._outbox.ended()
                        self._changed.notify()

        try:
            starts = await self._start_all()
            await run_each(group, handle, list(zip(self._leases, starts, strict=True)))
        except BaseException:
            # The sender must not wait for jobs that will never end.
            with self._changed:
                self._outbox.running = 0
                self._changed.notify()
            raise

    async def _start_all(self) -> list[Start | None]:
        """One start call for the tasks: per task, ``(reply, Date)`` or the error (the
        whole call's, if it failed as a whole). Queries: Nones."""
        if self._channel == "queries":
            return [None] * len(self._leases)
        body = {"worker_id": self._worker.worker_id,
                "items": [{"task_id": lease.get("task_id"),
                           "lease_token": lease.get("lease_token")} for lease in self._leases]}
        try:
            reply, server_time = await self._http.call_dated(
                "POST", path("tasks", "start"), json=body)
            answers = submitted(reply, "task", len(self._leases))
        except (LeasegateError, TransportError) as error:
            return [error] * len(self._leases)
        return [a if isinstance(a, LeasegateError) else (a, server_time) for a in answers]

    def _put(self, job: AsyncJob, ending: HandlerResult | Exception) -> None:
        """A job's result into the outbox (or, if none could be made, its end)."""
        body = self._worker._result_body(job, ending)
        with self._changed:
            if body is None:
                self._outbox.ended()
            else:
                self._outbox.put(job, body, current_time())
            self._changed.notify()

    async def _send_results(self) -> None:
        """The outbox's results as they fall due, until every job has ended and every
        result is answered. Never raises (but is cancellable): an unexpected error costs
        the results of the batch it met (logged), never another job's."""
        try:
            while (batch := await self._next_batch()) is not None:
                await self._send(batch)
        except Exception:
            log.exception("%s results: the sender failed; the leases will run out",
                          self._channel)  # fmt: skip

    async def _next_batch(self) -> list[Pending] | None:
        """The next results to send, once due; None when all are answered."""
        with self._changed:
            while self._outbox.running > 0 or self._outbox.pending:
                if (self._outbox.running <= 0 and self._outbox.pending
                        and not self._worker._carry and self._worker._carries()):
                    # Every job has ended and the worker leases again at once: the
                    # next lease call carries these (as much as one results call would).
                    self._worker._carry.extend(self._outbox.next_batch(math.inf) or ())
                    continue
                batch = self._outbox.next_batch(current_time())
                if batch is not None:
                    return batch
                wake_at = self._outbox.wake_at()
                await self._changed.wait_until(math.inf if wake_at is None else wake_at)
            return None

    async def _send(self, batch: list[Pending]) -> None:
        try:
            reply: Any = await self._http.call("POST", path(self._channel, "results"),
                                               json=self._outbox.request(batch), forever=True)
            with self._changed:
                self._outbox.answered(batch, reply, current_time(), self._worker._retry_refused)
        except LeasegateError as error:
            # Refused as a whole (e.g. too large together): one by one, as alone.
            log.warning("%s results: a batch of %d refused (%s); sending each alone",
                        self._channel, len(batch), error)  # fmt: skip
            for item in batch:
                await self._worker._send_result(item.job, item.body)
        except Exception:
            log.exception("%s results: a batch of %d could not be sent, given up (%s)",
                          self._channel, len(batch), ", ".join(item.job.id for item in batch))
