"""The worker's steps: lease, start, run the handler while renewing, report.

The rules of the protocol and the decisions are in ``_protocol``; the renewals in
``renewals``; a batch's outbox in ``_batch``. Written once, for :class:`AsyncWorker`
and, generated from it by ``scripts/sync_sdk.py``, :class:`Worker`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

import httpx

from leasegate.client._async.backend import (
    Stopper,
    TaskGroup,
    check_unbatched_max,
    current_time,
    open_task_group,
    run_each,
)
from leasegate.client._async.batches import BatchedCall
from leasegate.client._async.carried import carried_answered, carried_items, send_alone
from leasegate.client._async.http import AsyncHTTP, AsyncHTTPOwner
from leasegate.client._async.renewals import Renewals
from leasegate.client._batch import DEFAULT_LINGER, Pending
from leasegate.client._errors import LeasegateError, TransportError
from leasegate.client._http import DEFAULT_TIMEOUT, Retry, path
from leasegate.client._job import (
    AsyncHandler,
    AsyncJob,
    BaseJob,
    Channel,
    Failed,
    HandlerResult,
    Outcome,
)
from leasegate.client._protocol import (
    IDLE_PAUSE,
    NOT_EXECUTED,
    UNCONFIRMED_START_REPORTS,
    Lease,
    Stopped,
    _lease_name,
    _start_unconfirmed,
    _WorkerBase,
    interrupted,
    log_interrupted,
)
from leasegate.client._types import JSONObject

log = logging.getLogger("leasegate.client")

Start = tuple[Mapping[str, Any], float | None] | LeasegateError | TransportError
"""A task's start: the reply and its ``Date``, or why it could not be confirmed."""


class Report(Protocol):
    """Where a job's ending goes: sent alone (``AsyncWorker._report``) or into a batch's
    outbox."""

    async def __call__(self, job: AsyncJob, ending: HandlerResult | Exception, /) -> None: ...


async def _ending(handler: AsyncHandler, job: AsyncJob) -> HandlerResult | Exception:
    """What the handler returned or raised (an exception is reported as failed)."""
    try:
        return await handler(job)
    except Outcome as outcome:
        return outcome
    except Exception as error:
        log.exception("%s %s: the handler raised; reporting failed", job.channel, job.id)
        return error


class AsyncWorker(_WorkerBase, AsyncHTTPOwner):
    """A worker: leases jobs and runs your handler on each, doing the protocol for it.

    ``Worker`` blocks: its handler takes a :class:`Job` and runs in the calling
    thread, renewals in a background thread. ``AsyncWorker``'s handler is a coroutine
    function taking an :class:`AsyncJob`, under trio or asyncio (anyio).

    ``channel`` is ``"tasks"`` (irreversible, at most once) or ``"queries"``
    (read-only, at least once); ``sites`` limits what is leased; ``wait_seconds``
    (0–30) is the long-poll. ``max``: ``AsyncWorker`` leases up to ``max`` jobs a
    call and runs them at once (none waits for another, so each is started well
    within its claim window), each renewed on its own; an error in one job never
    cancels another. ``Worker`` leases one at a time (``max`` 1): without ``batch``
    its handler runs alone. ``wall_clock`` returns the time in seconds since the
    epoch; it is used only if the gateway's replies carry no ``Date`` header
    (renewals are timed by the gateway's clock and the local monotonic one, so the
    worker's clock need not agree with the gateway's); its default is ``time.time()``
    taken once and advanced by the monotonic clock (``AsyncWorker``: anyio's, so it
    follows a mock clock in tests). ``transport`` and ``retry`` as for
    :class:`Client`.

    ``permanent``: exception types that a query's handler raises for an error trying
    again cannot mend (besides :class:`PermanentError`): the query fails at once
    instead of being retried after a backoff. A query's handler may also return or
    raise :class:`Snooze` to have it queued again later without spending an attempt.

    ``batch`` (2–100) takes up to ``batch`` jobs a lease call and runs their handlers
    side by side (``Worker``: in threads, so the handler must be thread-safe),
    with the tasks started in one call and the results reported together once each
    has waited at most ``linger`` seconds (never past its lease); every per-job rule
    above holds for each job.

    ``run`` sends the results of the jobs that end last on the lease call that
    follows (``results``), not in a call of their own (see ``carried``). With
    ``batch``, after a lease call that came back with fewer than ten jobs and short of
    ``batch`` (no backlog), that call waits until the first of its results has
    lingered ``linger`` seconds, so that the jobs submitted meanwhile come back on it:
    a busy worker makes about one lease call per ``batch`` jobs, and one that is kept
    waiting for work about one per linger, not one per job.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
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
        permanent: Iterable[type[BaseException]] = (),
    ) -> None:
        if batch == 1:
            check_unbatched_max(max)
        super().__init__(worker_id, channel, sites, wait_seconds, max, retry or Retry(),
                         batch, linger)
        self.permanent = tuple(permanent)
        self._http = AsyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=self._retry
        )
        self._wall_clock = wall_clock
        self._epoch: float | None = None
        self._stopper = Stopper()
        self._carry: list[Pending] = []  # results for the next lease call (see carried)
        self._carrying = False  # run(): a lease call follows the jobs' end at once
        self._last_leased = 0  # how many jobs the last lease call brought

    async def run(self, handler: AsyncHandler) -> None:
        """Lease and handle jobs until :meth:`stop` (or cancellation). A gateway that
        cannot be reached is retried for ever; an error answer to a lease (bad key, bad
        site) is raised. Ctrl-C (KeyboardInterrupt: ``Worker``, or ``AsyncWorker``'s
        ``run`` awaited in trio's main task) ends it at once: one warning line, and
        ``run`` returns; what it held is not reported (see ``log_interrupted``).
        (``asyncio.run`` instead cancels ``run`` and raises KeyboardInterrupt itself,
        outside the worker.)"""
        try:
            while not self._stopper.stopped:
                began = current_time()
                handled = await self._run_once(handler, forever=True)
                if self._idle(handled, current_time() - began) and not self._carry:
                    await self._stopper.wait(IDLE_PAUSE)
                elif (gathering := self._gathering(self._carry, self._last_leased)) > 0:
                    await self._stopper.wait(gathering)  # see _gathering
            await send_alone(self, self._take_carry())  # stopped: no lease call to carry them
        except BaseException as error:
            if not interrupted(error):
                raise
            self._stopper.stop()
            log_interrupted(self.worker_id)

    async def run_once(self, handler: AsyncHandler) -> int:
        """Lease once (waiting up to ``wait_seconds``), handle what came, and return how
        many handlers ran. Raises :class:`TransportError` if the lease could not be sent."""
        return await self._run_once(handler, forever=False)

    def stop(self) -> None:
        """Ask :meth:`run` to return: running jobs are finished and reported, a retry or
        idle pause ends at once, and so does a waiting long-poll (``AsyncWorker``; call
        it from the event loop's thread) or it is finished first (``Worker``; call it
        from any thread or a signal handler). A stopped worker stays stopped."""
        self._stopper.stop()

    def _now(self) -> float:
        return current_time()

    def _wall(self) -> float:
        if self._wall_clock is not None:
            return self._wall_clock()
        if self._epoch is None:
            self._epoch = time.time() - current_time()
        return self._epoch + current_time()

    def _carries(self) -> bool:
        """Whether the results of jobs that end now go with the next lease call: only
        when one follows at once (``run``, not stopped)."""
        return self._carrying and not self._stopper.stopped

    def _take_carry(self) -> list[Pending]:
        carried, self._carry = self._carry, []
        return carried

    async def _run_once(self, handler: AsyncHandler, *, forever: bool) -> int:
        self._carrying = forever
        leases, server_time = await self._lease(forever=forever)
        self._last_leased = len(leases)
        if not leases:
            return 0
        handled: list[int] = []  # per job, 1 if its handler ran (appended by its task)
        async with open_task_group() as group:
            renewals = Renewals(self, self._http, group)
            if self.batch > 1:
                batched = BatchedCall(self, self._http, renewals, leases, server_time)
                await batched.run(group, handler, handled)
            else:
                await self._run_alone(group, renewals, leases, handler, handled)
        return sum(handled)

    async def _lease(self, *, forever: bool) -> tuple[Sequence[Lease], float | None]:
        """A lease call's leases and its ``Date``; none if :meth:`stop` ended it. It
        carries the results of the jobs that ended last (see ``carried``)."""
        carried = self._take_carry()
        body = self._lease_body()
        if carried:
            body["results"] = carried_items(self.channel, carried)
        reply: Any = None
        server_time: float | None = None
        try:
            with self._stopper.interruptible():
                reply, server_time = await self._http.call_dated(
                    "POST", path(self.channel, "lease"), json=body,
                    extra_timeout=self.wait_seconds, forever=forever,
                    pause=self._stopper.sleep,
                )  # fmt: skip
        except Stopped:
            pass
        except (LeasegateError, TransportError):
            await send_alone(self, carried)
            raise
        if reply is None:  # stopped: the results go alone (a retry, if they arrived)
            await send_alone(self, carried)
            return [], None
        if carried:
            await carried_answered(self, carried, reply)
        return cast(Sequence[Lease], reply["items"]), server_time

    async def _run_alone(self, group: TaskGroup, renewals: Renewals, leases: Sequence[Lease],
                         handler: AsyncHandler, handled: list[int]) -> None:
        """The jobs of a lease call at once, each started and reported on its own."""

        unreported = [len(leases)]

        async def report(job: AsyncJob, ending: HandlerResult | Exception) -> None:
            unreported[0] -= 1
            if unreported[0] == 0 and self._carries():  # the last: the lease call carries it
                body = self._result_body(job, ending)
                if body is not None:
                    now = current_time()
                    self._carry.append(Pending(job, body, now, now))
                return
            await self._report(job, ending)

        async def handle(lease: Lease) -> None:
            handled.append(await self._handle(lease, handler, renewals, report))

        await run_each(group, handle, leases)

    async def _handle(self, lease: Lease, handler: AsyncHandler, renewals: Renewals,
                      report: Report, start: Start | None = None,
                      server_time: float | None = None) -> int:
        """One job: a task is started (unless ``start`` is its batch's answer), its handler
        run while renewing, its ending reported; 1 if the handler ran. Its trouble is
        logged: it never cancels or skips another job of the lease call."""
        try:
            job = AsyncJob(self.channel, lease, self.worker_id)
            if self.channel == "queries":
                self._leased(job, server_time)
                await report(job, await _ending(handler, job))
                return 1
            if start is None:
                start = await self._start(job)
            if isinstance(start, LeasegateError | TransportError):
                self._not_started(job, start)
                if _start_unconfirmed(start):
                    await self._report_not_executed(job)
                return 0
            return await self._run_started(job, handler, renewals, report, start)
        except Exception:
            log.exception("%s %s: handling the lease failed", self.channel, _lease_name(lease))
            return 0

    async def _run_started(self, job: AsyncJob, handler: AsyncHandler, renewals: Renewals,
                           report: Report, start: tuple[Mapping[str, Any], float | None]) -> int:
        """Run the handler of a started task (its start reply just came), renewing."""
        started, server_time = start
        arrived = current_time()
        interval = self._next_renewal(job, started, server_time)
        if job.cancel_requested:
            await report(job, self._canceled_at_start(job))
            return 0
        renewals.add(job, arrived + interval)
        try:
            ending = await _ending(handler, job)
        finally:
            renewals.discard(job)  # a renewal on its way is abandoned, as before the result
        await report(job, ending)
        return 1

    async def _start(self, job: AsyncJob) -> Start:
        try:
            return await self._http.call_dated(
                "POST", path("tasks", job.id, "start"), json=job._fence()
            )
        except (LeasegateError, TransportError) as error:
            return error

    async def _report(self, job: AsyncJob, ending: HandlerResult | Exception) -> None:
        """Send the result until the gateway answers; never raises (but is cancellable)."""
        body = self._result_body(job, ending)
        if body is not None:
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
