"""The :class:`AsyncWorker`, for trio or asyncio: its own steps, with ``await`` and tasks.

The rules of the protocol and the decisions both workers share are in ``_protocol``
(:class:`_WorkerBase`); this module only takes the steps (lease, start, renew,
report). ``_worker`` takes the same steps with blocking calls: the two mirror each
other, so a change to one belongs in the other.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self, cast

import anyio
import anyio.abc
import httpx

from leasegate.client._batch import DEFAULT_LINGER, Outbox, submitted
from leasegate.client._errors import (
    LeasegateError,
    TransportError,
)
from leasegate.client._http import DEFAULT_TIMEOUT, AsyncHTTP, Retry, path
from leasegate.client._job import (
    AsyncHandler,
    AsyncJob,
    BaseJob,
    Channel,
    Failed,
    HandlerResult,
)
from leasegate.client._protocol import (
    IDLE_PAUSE,
    NOT_EXECUTED,
    UNCONFIRMED_START_REPORTS,
    Lease,
    _async_ending,
    _lease_name,
    _start_unconfirmed,
    _WorkerBase,
)
from leasegate.client._types import JSONObject
from leasegate.client._worker import _interrupted, _log_interrupted

log = logging.getLogger("leasegate.client")


class AsyncWorker(_WorkerBase):
    """An asynchronous worker (anyio: runs under trio or asyncio).

    Same settings as :class:`Worker`, except that ``max`` may be 1–100: the jobs
    of one lease call are started and handled concurrently (none waits for
    another, so each is started well within its claim window), each with its
    renewals in a task of its own; an error in one job never cancels another.
    ``batch`` (2–100) does the same with fewer requests: up to ``batch`` jobs a
    lease call, the tasks started in one call, the results reported together
    once each has waited at most ``linger`` seconds (never past its lease).
    ``wall_clock`` (used only without ``Date`` headers, as for :class:`Worker`)
    defaults to ``time.time()`` taken once and advanced by
    ``anyio.current_time()``, so it follows a mock clock in tests.
    """

    def __init__(
        self,
        base_url: str,
        key: str,
        worker_id: str,
        *,
        channel: Channel = "tasks",
        sites: Iterable[str] | None = None,
        wait_seconds: float = 20,
        max: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: Retry | None = None,
        wall_clock: Callable[[], float] | None = None,
        batch: int = 1,
        linger: float = DEFAULT_LINGER,
    ) -> None:
        super().__init__(worker_id, channel, sites, wait_seconds, max, retry or Retry(),
                         batch, linger)
        self._http = AsyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=self._retry
        )
        self._wall_clock = wall_clock
        self._epoch: float | None = None
        self._stopped = False
        self._waiting: anyio.CancelScope | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def run(self, handler: AsyncHandler) -> None:
        """Lease and handle jobs until :meth:`stop` or cancellation. A gateway that cannot
        be reached is retried for ever; an error answer to a lease is raised. A
        KeyboardInterrupt that trio raises in it (Ctrl-C while ``run`` is awaited in the
        main task) ends it: one warning line, and ``run`` returns, as the sync worker's
        does. (``asyncio.run`` instead cancels ``run`` and raises KeyboardInterrupt
        itself, outside the worker.)"""
        try:
            while not self._stopped:
                began = anyio.current_time()
                handled = await self._run_once(handler, forever=True)
                if self._idle(handled, anyio.current_time() - began):
                    with self._interruptible():
                        await anyio.sleep(IDLE_PAUSE)
        except BaseException as error:
            if not _interrupted(error):
                raise
            self._stopped = True
            _log_interrupted(self.worker_id)

    async def run_once(self, handler: AsyncHandler) -> int:
        """Lease once (waiting up to ``wait_seconds``), handle what came, and return how
        many handlers ran. Raises :class:`TransportError` if the lease could not be sent."""
        return await self._run_once(handler, forever=False)

    def stop(self) -> None:
        """Ask :meth:`run` to return: a waiting long-poll is abandoned at once, running
        jobs are finished and reported. Call it from the event loop's thread."""
        self._stopped = True
        if self._waiting is not None:
            self._waiting.cancel()

    def _now(self) -> float:
        return anyio.current_time()

    def _wall(self) -> float:
        if self._wall_clock is not None:
            return self._wall_clock()
        if self._epoch is None:
            self._epoch = time.time() - anyio.current_time()
        return self._epoch + anyio.current_time()

    @contextmanager
    def _interruptible(self) -> Iterator[None]:
        """A wait that :meth:`stop` abandons (at once if already stopped)."""
        with anyio.CancelScope() as scope:
            self._waiting = scope
            if self._stopped:
                scope.cancel()
            try:
                yield
            finally:
                self._waiting = None

    async def _run_once(self, handler: AsyncHandler, *, forever: bool) -> int:
        leases: Sequence[Lease] = []
        server_time = None
        with self._interruptible():
            reply, server_time = await self._http.call_dated(
                "POST", path(self.channel, "lease"), json=self._lease_body(),
                extra_timeout=self.wait_seconds, forever=forever,
            )  # fmt: skip
            leases = cast(Sequence[Lease], reply["items"])
        if self.batch > 1 and leases:
            return await self._run_batch(leases, server_time, handler)
        handled = 0

        async def handle(lease: Lease, renewals: _Renewals) -> None:
            nonlocal handled
            try:
                ran = await self._handle(lease, handler, renewals)
            except Exception:  # never let one job's trouble cancel its siblings
                log.exception("%s %s: handling the lease failed", self.channel,
                              _lease_name(lease))  # fmt: skip
                return
            finally:
                renewals.ended()
            handled += ran  # not `handled += await ...`: that reads `handled` before waiting

        async with anyio.create_task_group() as tg:
            renewals = _Renewals(self, tg, len(leases))
            if self.channel == "tasks" and leases:  # queries are never renewed
                tg.start_soon(renewals.run)
            for lease in leases:
                tg.start_soon(handle, lease, renewals)
        return handled

    async def _handle(self, lease: Lease, handler: AsyncHandler, renewals: _Renewals) -> int:
        job = AsyncJob(self.channel, lease, self.worker_id)
        if self.channel == "queries":
            await self._report(job, await _async_ending(handler, job))
            return 1
        try:
            started, server_time = await self._http.call_dated(
                "POST", path("tasks", job.id, "start"), json=job._fence()
            )
        except (LeasegateError, TransportError) as error:
            self._not_started(job, error)
            if _start_unconfirmed(error):
                await self._report_not_executed(job)
            return 0
        return await self._run_started(job, handler, started, server_time, self._report,
                                       renewals)

    async def _run_started(self, job: AsyncJob, handler: AsyncHandler, started: Mapping[str, Any],
                           server_time: float | None, report: _Report,
                           renewals: _Renewals) -> int:
        """Run the handler of a started task (its start reply just came), renewing."""
        arrived = anyio.current_time()
        interval = self._next_renewal(job, started, server_time)
        if job.cancel_requested:
            await report(job, self._canceled_at_start(job))
            return 0
        renewals.add(job, arrived + interval)
        try:
            ending = await _async_ending(handler, job)
        finally:
            renewals.discard(job)  # a renewal on its way is abandoned, as before the result
        await report(job, ending)
        return 1

    # ---- batches ------------------------------------------------------------------------

    async def _run_batch(self, leases: Sequence[Lease], server_time: float | None,
                         handler: AsyncHandler) -> int:
        """The jobs of one lease call, started together (tasks) and reported together."""
        outbox = Outbox(self.channel, self.worker_id, self.batch, self.linger, self._retry,
                        len(leases))
        signal = _Signal()
        handled = 0

        async def report(job: AsyncJob, ending: HandlerResult | Exception) -> None:
            try:
                outbox.put(job, job._result_body(ending), anyio.current_time())
            except Exception:
                self._report_crashed(job)
                outbox.ended()
            signal.set()

        async def handle(lease: Lease, start: Any, renewals: _Renewals) -> None:
            nonlocal handled
            put = False

            async def report_once(job: AsyncJob, ending: HandlerResult | Exception) -> None:
                nonlocal put
                put = True
                await report(job, ending)

            try:
                ran = await self._handle_batched(lease, server_time, start, handler,
                                                 report_once, renewals)
            except Exception:  # never let one job's trouble cancel its siblings
                log.exception("%s %s: handling the lease failed", self.channel,
                              _lease_name(lease))  # fmt: skip
                ran = 0
            finally:
                renewals.ended()
            handled += ran
            if not put:  # ended with no result to send: the outbox waits for it no more
                outbox.ended()
                signal.set()

        async with anyio.create_task_group() as tg:
            renewals = _Renewals(self, tg, len(leases))
            if self.channel == "tasks" and leases:  # queries are never renewed
                tg.start_soon(renewals.run)
            tg.start_soon(self._send_results, outbox, signal)
            starts = await self._start_all(leases)
            for lease, start in zip(leases, starts, strict=True):
                tg.start_soon(handle, lease, start, renewals)
        return handled

    async def _start_all(self, leases: Sequence[Lease]) -> list[Any]:
        """One start call for the tasks of a lease call: per task, ``(reply, Date)`` or
        the error (the whole call's, if it failed as a whole). Queries: Nones."""
        if self.channel == "queries":
            return [None] * len(leases)
        body = {"worker_id": self.worker_id,
                "items": [{"task_id": lease.get("task_id"),
                           "lease_token": lease.get("lease_token")} for lease in leases]}
        try:
            reply, server_time = await self._http.call_dated(
                "POST", path("tasks", "start"), json=body)
            answers = submitted(reply, "task", len(leases))
        except (LeasegateError, TransportError) as error:
            return [error] * len(leases)
        return [a if isinstance(a, LeasegateError) else (a, server_time) for a in answers]

    async def _handle_batched(self, lease: Lease, server_time: float | None, start: Any,
                              handler: AsyncHandler, report: _Report,
                              renewals: _Renewals) -> int:
        job = AsyncJob(self.channel, lease, self.worker_id)
        if self.channel == "queries":
            self._leased(job, server_time)
            await report(job, await _async_ending(handler, job))
            return 1
        if isinstance(start, LeasegateError | TransportError):
            self._not_started(job, start)
            if _start_unconfirmed(start):
                await self._report_not_executed(job)
            return 0
        started, server_time = start
        return await self._run_started(job, handler, started, server_time, report, renewals)

    async def _send_results(self, outbox: Outbox, signal: _Signal) -> None:
        """Send the outbox's results as they fall due, until every job has ended and
        every result is answered."""
        while outbox.running > 0 or outbox.pending:
            batch = outbox.next_batch(anyio.current_time())
            if batch is None:
                wake_at = outbox.wake_at()
                with anyio.move_on_after(
                        60.0 if wake_at is None else wake_at - anyio.current_time()):
                    await signal.wait()
                continue
            try:
                reply = await self._http.call("POST", path(self.channel, "results"),
                                              json=outbox.request(batch), forever=True)
            except LeasegateError as error:
                # Refused as a whole (e.g. too large together): one by one, as alone.
                log.warning("%s results: a batch of %d refused (%s); sending each alone",
                            self.channel, len(batch), error)  # fmt: skip
                for item in batch:
                    await self._send_result(item.job, item.body)
                continue
            outbox.answered(batch, reply, anyio.current_time(), self._retry_refused)

    async def _renew(self, job: AsyncJob) -> float | None:
        """Renew ``job``'s lease once: when to renew it next (``anyio.current_time()``),
        or None if the lease is lost. Never raises (but is cancellable)."""
        try:
            reply, server_time = await self._http.call_dated(
                "POST", path("tasks", job.id, "renew"), json=job._renew_body(), attempts=1
            )
            arrived = anyio.current_time()
            return arrived + self._next_renewal(job, reply, server_time)
        except Exception as error:
            delay = self._renew_retry(job, error)
            return None if delay is None else anyio.current_time() + delay

    async def _report(self, job: AsyncJob, ending: HandlerResult | Exception) -> None:
        """Send the result until the gateway answers; never raises (but is cancellable)."""
        try:
            body = job._result_body(ending)
        except Exception:
            self._report_crashed(job)
            return
        await self._send_result(job, body)

    async def _send_result(self, job: BaseJob, first: JSONObject) -> None:
        try:
            body: JSONObject | None = first
            tried = 0
            while body is not None:
                tried += 1
                try:
                    await self._http.call(
                        "POST", path(self.channel, job.id, "result"), json=body, forever=True
                    )
                    return
                except LeasegateError as error:
                    body = self._retry_refused(job, body, error, tried)
        except Exception:
            self._report_crashed(job)

    async def _report_not_executed(self, job: AsyncJob) -> None:
        """Offer ``failed`` (not executed) for a task whose start was not confirmed."""
        try:
            await self._http.call(
                "POST", path("tasks", job.id, "result"),
                json=job._result_body(Failed(NOT_EXECUTED)), attempts=UNCONFIRMED_START_REPORTS,
            )  # fmt: skip
        except (LeasegateError, TransportError) as error:
            self._not_executed(job, error)
        else:
            self._not_executed(job, None)


_Report = Callable[[AsyncJob, HandlerResult | Exception], Awaitable[None]]


class _Renewals:
    """The renewals of a lease call's running tasks, from one task: it sleeps until the
    first is due and sends each due renewal in a task of its own (so that none waits
    for another), then files the job's next one. Most handlers end well before their
    first renewal (a third of the lease): they then cost no task, no task group and no
    timer of their own. ``discard`` (the handler ended) abandons a renewal on its way."""

    def __init__(self, worker: AsyncWorker, group: anyio.abc.TaskGroup, jobs: int) -> None:
        self._worker = worker
        self._group = group
        self._left = jobs  # jobs whose handling has not ended: run() returns at none
        self._scope = anyio.CancelScope()
        self._live: set[AsyncJob] = set()  # handlers running
        self._due: dict[AsyncJob, float] = {}
        self._sending: dict[AsyncJob, anyio.CancelScope] = {}
        self._wake_at = math.inf  # when run() wakes up next
        self._signal = _Signal()

    def add(self, job: AsyncJob, at: float) -> None:
        """``job``'s handler starts: renew at ``at`` (``anyio.current_time()``), then as
        the replies say, until :meth:`discard`."""
        self._live.add(job)
        self._schedule(job, at)

    def _schedule(self, job: AsyncJob, at: float) -> None:
        self._due[job] = at
        if at < self._wake_at:
            self._signal.set()

    def discard(self, job: AsyncJob) -> None:
        """The handler ended: no more renewals (one on its way is abandoned)."""
        self._live.discard(job)
        self._due.pop(job, None)
        scope = self._sending.pop(job, None)
        if scope is not None:
            scope.cancel()

    def ended(self) -> None:
        """A job of the lease call was handled (started or not): when all were, stop."""
        self._left -= 1
        if self._left <= 0:
            self._scope.cancel()

    async def run(self) -> None:
        with self._scope:
            if self._left > 0:
                await self._run()

    async def _run(self) -> None:
        while True:
            now = anyio.current_time()
            for job in [job for job, at in self._due.items() if at <= now]:
                del self._due[job]
                self._group.start_soon(self._renew, job)
            self._wake_at = min(self._due.values(), default=math.inf)
            with anyio.CancelScope(deadline=self._wake_at):
                await self._signal.wait()

    async def _renew(self, job: AsyncJob) -> None:
        with anyio.CancelScope() as scope:
            self._sending[job] = scope
            try:
                next_at = await self._worker._renew(job)
            finally:
                if self._sending.get(job) is scope:
                    del self._sending[job]
            # A reply that came just as the handler ended is taken in, but no more.
            if next_at is not None and job in self._live:
                self._schedule(job, next_at)


class _Signal:
    """A wake-up that can be waited for again and again (a fresh event each time)."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = anyio.Event()
