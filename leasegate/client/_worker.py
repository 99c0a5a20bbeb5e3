"""Workers: lease, start, renew, report, with every retry of the protocol done right.

The rules (DESIGN.md §1), whatever the network does:

- a lease call that got no answer is repeated with the same ``request_id``
  (the gateway hands back the same unstarted lease);
- a task is started before its handler runs; if start is refused (6002: the
  claim window passed, or the task was canceled) the handler does not run.
  If the start's reply says the task is already to be canceled, the handler
  does not run either: the task is reported ``canceled`` ("canceled before it
  ran"). If start could not be confirmed at all (its answers lost until the
  retries ran out), the handler does not run, and ``failed`` ("not executed:
  the worker could not confirm start") is offered under the same token for a
  bounded while (``UNCONFIRMED_START_REPORTS`` tries): the gateway takes it
  only if the start did take effect, and a 409 means it never did (the claim
  just runs out);
- the handler runs at most once per lease; start, renew and result are
  repeated with the same token and the same body, never the handler;
- while a task's handler runs, the lease is renewed a third of the lease's
  length after each start or renew reply, timed on the local monotonic clock.
  The length is the gateway's own: the reply's ``lease_expires_at`` minus its
  ``Date`` header, so a worker whose wall clock is off still renews in time
  (without a ``Date``, the length last learned, else the worker's wall clock,
  is used). Each renewal carries the latest checkpoint and brings back the
  cancel and pause requests;
- the result is made one the gateway takes, keeping the outcome (see
  ``BaseJob._result_body``), and repeated until the gateway answers it. It is
  sent even when a renewal found the lease lost: the gateway fences it by
  token, and a stale task takes the result of its last lease (the worker
  knows best what happened). A 409 on the result is logged and given up;
- an error while handling or reporting one job is logged and never cancels
  or skips another job of the same lease call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Self, cast

import anyio
import httpx

from leasegate.client._client import new_id
from leasegate.client._errors import (
    InvalidRequest,
    LeasegateError,
    PayloadTooLarge,
    QueryLeaseInvalid,
    RateLimited,
    TaskLeaseInvalid,
    TransportError,
)
from leasegate.client._http import DEFAULT_TIMEOUT, AsyncHTTP, Retry, SyncHTTP, path
from leasegate.client._job import (
    NOT_SENT,
    AsyncHandler,
    AsyncJob,
    BaseJob,
    Canceled,
    Channel,
    Failed,
    Handler,
    HandlerResult,
    Job,
    Outcome,
)
from leasegate.client._types import JSONObject

log = logging.getLogger("leasegate.client")

IDLE_PAUSE: Final = 1.0
"""``run()`` pauses this long after a lease call that came back early and empty
(a draining gateway, or ``wait_seconds=0``), so an idle worker never spins."""

MIN_RENEW_INTERVAL: Final = 0.05
EXPIRED_RENEW_INTERVAL: Final = 1.0

UNCONFIRMED_START_REPORTS: Final = 12
"""How many times ``failed`` ("not executed") is offered for a task whose start could
not be confirmed. With the default :class:`Retry` pauses (0.5 s doubling up to 30 s,
jittered) that is about 1.5 to 3 minutes, around the default claim window plus lease
(30 s + 120 s); bounded, so that a worker cut off from the gateway goes back to leasing
instead of waiting on one task for ever."""

NOT_EXECUTED: Final = "not executed: the worker could not confirm start"
CANCELED_BEFORE_START: Final = "canceled before it ran"

Lease = Mapping[str, Any]


def renew_interval(duration: float | None) -> float:
    """Seconds from a start or renew reply to the next renewal: a third of the lease's
    length (``duration``, by the gateway's clock); a lease of unknown or no length
    left is renewed after ``EXPIRED_RENEW_INTERVAL``."""
    if duration is None or duration <= 0:
        return EXPIRED_RENEW_INTERVAL
    return max(MIN_RENEW_INTERVAL, duration / 3)


def _start_unconfirmed(error: Exception) -> bool:
    """A start that failed without an answer (lost, 5xx, 429 until the retries ran
    out): it may have taken effect."""
    if isinstance(error, LeasegateError):
        return error.status >= 500 or isinstance(error, RateLimited)
    return isinstance(error, TransportError)


def _slimmed(body: JSONObject, error: LeasegateError) -> JSONObject | None:
    """The result body without its bulk, to try once more after a 413 (a gateway set up
    with a smaller ``max_json_field_bytes``): the outcome is kept, the result replaced by
    a note, the checkpoint left out. None when that cannot help (or would resume a
    paused batch from an older checkpoint)."""
    if not isinstance(error, PayloadTooLarge) or body["outcome"] == "paused":
        return None
    if "result" not in body and "progress" not in body:
        return None
    slim = {name: value for name, value in body.items() if name not in ("result", "progress")}
    why = f"result not sent: the gateway refused it ({error.message[:500]})"
    slim["result"] = {NOT_SENT: why}
    return slim


def _lease_name(lease: Lease) -> str:
    return str(lease.get("task_id") or lease.get("query_id") or "?")


def _ending(handler: Handler, job: Job) -> HandlerResult | Exception:
    """What the handler returned or raised (an exception is reported as failed)."""
    try:
        return handler(job)
    except Outcome as outcome:
        return outcome
    except Exception as error:
        log.exception("%s %s: the handler raised; reporting failed", job.channel, job.id)
        return error


async def _async_ending(handler: AsyncHandler, job: AsyncJob) -> HandlerResult | Exception:
    try:
        return await handler(job)
    except Outcome as outcome:
        return outcome
    except Exception as error:
        log.exception("%s %s: the handler raised; reporting failed", job.channel, job.id)
        return error


class _WorkerBase:
    """The settings and message bodies both workers share."""

    def __init__(
        self,
        worker_id: str,
        channel: Channel,
        sites: Iterable[str] | None,
        wait_seconds: float,
        max: int,
    ) -> None:
        if channel not in ("tasks", "queries"):
            raise ValueError(f"channel must be 'tasks' or 'queries', not {channel!r}")
        self.worker_id = worker_id
        self.channel: Channel = channel
        self.sites: list[str] | None = None if sites is None else list(sites)
        self.wait_seconds = wait_seconds
        self.max = max
        self._lease_ttl: float | None = None  # a task lease's length, by the gateway's clock

    def _wall(self) -> float:
        """The worker's wall clock (seconds since the epoch)."""
        raise NotImplementedError

    def _lease_duration(self, job: BaseJob, server_time: float | None) -> float | None:
        """How long the lease of a start or renew reply lasts, by the gateway's clock:
        its ``lease_expires_at`` minus the reply's ``Date``. Without a ``Date``, the
        length learned from an earlier reply (the gateway's ``task_lease_ttl``), else
        what is left by the worker's own wall clock."""
        expires = job.lease_expires_at
        if expires is None:
            return self._lease_ttl
        if server_time is not None:
            if expires > server_time:
                self._lease_ttl = expires - server_time
            return expires - server_time
        if self._lease_ttl is not None:
            return self._lease_ttl
        return expires - self._wall()

    def _lease_body(self) -> JSONObject:
        """A lease request; a fresh ``request_id``, which every retry of it repeats."""
        body: JSONObject = {
            "worker_id": self.worker_id,
            "wait_seconds": self.wait_seconds,
            "max": self.max,
            "request_id": new_id(),
        }
        if self.sites is not None:
            body["sites"] = self.sites
        return body

    def _idle(self, handled: int, elapsed: float) -> bool:
        return handled == 0 and elapsed < max(IDLE_PAUSE, self.wait_seconds / 2)

    def _not_started(self, job: BaseJob, error: Exception) -> None:
        if isinstance(error, TaskLeaseInvalid):
            log.info("task %s: start refused, not running it (%s)", job.id, error)
        elif _start_unconfirmed(error):
            log.warning("task %s: start not confirmed, not running it; reporting it was not "
                        "executed, in case the start took effect (%s)", job.id, error)  # fmt: skip
        else:
            log.warning("task %s: could not start, not running it (%s)", job.id, error)

    def _not_executed(self, job: BaseJob, error: Exception | None) -> None:
        """Log the answer to the "not executed" report of an unconfirmed start."""
        if error is None:
            log.warning("task %s: its start had taken effect; reported failed (%s)",
                        job.id, NOT_EXECUTED)  # fmt: skip
        elif isinstance(error, TaskLeaseInvalid):
            log.info("task %s: its start never took effect; the claim runs out and the task "
                     "is queued again (%s)", job.id, error)  # fmt: skip
        else:
            log.error("task %s: could not report that it never ran (%s); if its start took "
                      "effect it will go stale and need an operator (the handler did not "
                      "run)", job.id, error)  # fmt: skip

    def _canceled_at_start(self, job: BaseJob) -> Canceled:
        log.info("task %s: cancel requested before it ran; reporting canceled", job.id)
        return Canceled(CANCELED_BEFORE_START)

    def _result_refused(self, job: BaseJob, body: JSONObject, error: LeasegateError) -> None:
        if isinstance(error, TaskLeaseInvalid | QueryLeaseInvalid):
            log.warning("%s %s: result refused, the job was taken from us (%s)",
                        job.channel, job.id, error)  # fmt: skip
        elif job.channel == "queries":
            log.error("%s %s: result refused (%s); the query will be leased again when its "
                      "lease runs out", job.channel, job.id, error)  # fmt: skip
        elif isinstance(error, InvalidRequest) and body["outcome"] == "paused":
            log.error("task %s: result refused (%s): only a batch task can pause. The task "
                      "stays running until its lease runs out, then goes stale and will need "
                      "an operator", job.id, error)  # fmt: skip
        else:
            log.error("task %s: result refused (%s); the task will go stale when its lease "
                      "runs out and need an operator", job.id, error)  # fmt: skip

    def _retry_refused(
        self, job: BaseJob, body: JSONObject, error: LeasegateError, tried: int
    ) -> JSONObject | None:
        """After the gateway refused a result: the body to try next, or None (logged)."""
        slim = None if tried > 1 else _slimmed(body, error)
        if slim is None:
            self._result_refused(job, body, error)
        else:
            log.warning("%s %s: result refused (%s); sending the outcome without the result",
                        job.channel, job.id, error)  # fmt: skip
        return slim

    def _report_crashed(self, job: BaseJob) -> None:
        log.exception("%s %s: could not report the result", job.channel, job.id)

    def _renew_failed(self, job: BaseJob, error: Exception) -> None:
        if isinstance(error, TaskLeaseInvalid):
            log.warning("task %s: lease lost (%s)", job.id, error)
            job._mark_lost()
        elif isinstance(error, LeasegateError | TransportError):
            log.warning("task %s: renew failed (%s)", job.id, error)
        else:
            log.error("task %s: renew failed", job.id, exc_info=error)


class Worker(_WorkerBase):
    """A synchronous worker: the handler runs in the calling thread, renewals in a
    background thread.

    ``channel`` is ``"tasks"`` (irreversible, at most once) or ``"queries"``
    (read-only, at least once); ``sites`` limits what is leased;
    ``wait_seconds`` (0–30) is the long-poll. ``max`` must be 1: the worker
    runs one handler at a time, and a second job leased with it would sit
    unstarted, holding its lane until the claim window (or the query's lease)
    ran out; lease several at once with :class:`AsyncWorker`, which runs them
    concurrently. ``wall_clock`` returns the time in seconds since the epoch
    (default ``time.time``); it is used only if the gateway's replies carry no
    ``Date`` header (renewals are timed by the gateway's clock and the local
    monotonic one, so the worker's clock need not agree with the gateway's).
    ``transport`` and ``retry`` as for :class:`Client`.
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
        transport: httpx.BaseTransport | None = None,
        retry: Retry | None = None,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        if max != 1:
            raise ValueError(
                f"Worker handles one job at a time, so max must be 1, not {max!r}: a job "
                "leased beside it would hold its lane unstarted until its claim ran out. "
                "Use AsyncWorker to run several jobs of one lease call concurrently."
            )
        super().__init__(worker_id, channel, sites, wait_seconds, max)
        self._http = SyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=retry or Retry()
        )
        self._clock = wall_clock or time.time
        self._stopped = threading.Event()

    def _wall(self) -> float:
        return self._clock()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def run(self, handler: Handler) -> None:
        """Lease and handle jobs until :meth:`stop`. A gateway that cannot be reached is
        retried for ever; an error answer to a lease (bad key, bad site) is raised."""
        while not self._stopped.is_set():
            began = time.monotonic()
            handled = self._run_once(handler, forever=True)
            if self._idle(handled, time.monotonic() - began):
                self._stopped.wait(IDLE_PAUSE)

    def run_once(self, handler: Handler) -> int:
        """Lease once (waiting up to ``wait_seconds``), handle what came, and return how
        many handlers ran. Raises :class:`TransportError` if the lease could not be sent."""
        return self._run_once(handler, forever=False)

    def stop(self) -> None:
        """Ask :meth:`run` to return once the current long-poll or job is over (from any
        thread or a signal handler). A stopped worker stays stopped."""
        self._stopped.set()

    def _run_once(self, handler: Handler, *, forever: bool) -> int:
        return sum(self._handle_safely(lease, handler) for lease in self._lease(forever=forever))

    def _lease(self, *, forever: bool) -> Sequence[Lease]:
        try:
            reply = self._http.call(
                "POST", path(self.channel, "lease"), json=self._lease_body(),
                extra_timeout=self.wait_seconds, forever=forever, sleep=self._pause,
            )  # fmt: skip
        except _Stopped:
            return []
        return cast(Sequence[Lease], reply["items"])

    def _pause(self, seconds: float) -> None:
        if self._stopped.wait(seconds):
            raise _Stopped

    def _handle_safely(self, lease: Lease, handler: Handler) -> int:
        try:
            return self._handle(lease, handler)
        except Exception:
            log.exception("%s %s: handling the lease failed", self.channel, _lease_name(lease))
            return 0

    def _handle(self, lease: Lease, handler: Handler) -> int:
        job = Job(self.channel, lease, self.worker_id)
        if self.channel == "queries":
            self._report(job, _ending(handler, job))
            return 1
        try:
            started, server_time = self._http.call_dated(
                "POST", path("tasks", job.id, "start"), json=job._fence()
            )
        except (LeasegateError, TransportError) as error:
            self._not_started(job, error)
            if _start_unconfirmed(error):
                self._report_not_executed(job)
            return 0
        arrived = time.monotonic()
        job._renewed(started)
        if job.cancel_requested:
            self._report(job, self._canceled_at_start(job))
            return 0
        due = arrived + renew_interval(self._lease_duration(job, server_time))
        finish_renewing = self._renew_in_background(job, due)
        try:
            ending = _ending(handler, job)
        finally:
            finish_renewing()
        self._report(job, ending)
        return 1

    def _renew_in_background(self, job: Job, due: float) -> Callable[[], None]:
        """Renew ``job``'s lease from ``due`` (``time.monotonic()``) on, until finished."""
        done = threading.Event()

        def renew() -> None:
            failures = 0
            next_at = due
            while not done.wait(max(0.0, next_at - time.monotonic())):
                try:
                    reply, server_time = self._http.call_dated(
                        "POST", path("tasks", job.id, "renew"), json=job._renew_body(), attempts=1
                    )
                    arrived = time.monotonic()
                    job._renewed(reply)
                    interval = renew_interval(self._lease_duration(job, server_time))
                except Exception as error:
                    self._renew_failed(job, error)
                    if job.lease_lost:
                        return
                    failures += 1
                    next_at = time.monotonic() + self._http.retry.delay(failures)
                    continue
                failures = 0
                next_at = arrived + interval

        thread = threading.Thread(target=renew, name=f"leasegate-renew-{job.id}", daemon=True)
        thread.start()

        def finish() -> None:
            done.set()
            thread.join()

        return finish

    def _report(self, job: Job, ending: HandlerResult | Exception) -> None:
        """Send the result until the gateway answers; never raises."""
        try:
            body: JSONObject | None = job._result_body(ending)
            tried = 0
            while body is not None:
                tried += 1
                try:
                    self._http.call(
                        "POST", path(self.channel, job.id, "result"), json=body, forever=True
                    )
                    return
                except LeasegateError as error:
                    body = self._retry_refused(job, body, error, tried)
        except Exception:
            self._report_crashed(job)

    def _report_not_executed(self, job: Job) -> None:
        """Offer ``failed`` (not executed) for a task whose start was not confirmed."""
        try:
            self._http.call(
                "POST", path("tasks", job.id, "result"),
                json=job._result_body(Failed(NOT_EXECUTED)), attempts=UNCONFIRMED_START_REPORTS,
            )  # fmt: skip
        except (LeasegateError, TransportError) as error:
            self._not_executed(job, error)
        else:
            self._not_executed(job, None)


class _Stopped(Exception):
    """Raised out of a retry pause when the worker is stopped."""


class AsyncWorker(_WorkerBase):
    """An asynchronous worker (anyio: runs under trio or asyncio).

    Same settings as :class:`Worker`, except that ``max`` may be 1–10: the jobs
    of one lease call are started and handled concurrently (none waits for
    another, so each is started well within its claim window), each with its
    renewals in a task of its own; an error in one job never cancels another.
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
    ) -> None:
        super().__init__(worker_id, channel, sites, wait_seconds, max)
        self._http = AsyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=retry or Retry()
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
        be reached is retried for ever; an error answer to a lease is raised."""
        while not self._stopped:
            began = anyio.current_time()
            handled = await self._run_once(handler, forever=True)
            if self._idle(handled, anyio.current_time() - began):
                with self._interruptible():
                    await anyio.sleep(IDLE_PAUSE)

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

    def _wall(self) -> float:
        if self._wall_clock is not None:
            return self._wall_clock()
        if self._epoch is None:
            self._epoch = time.time() - anyio.current_time()
        return self._epoch + anyio.current_time()

    def _interruptible(self) -> anyio.CancelScope:
        self._waiting = anyio.CancelScope()
        if self._stopped:
            self._waiting.cancel()
        return self._waiting

    async def _run_once(self, handler: AsyncHandler, *, forever: bool) -> int:
        leases: Sequence[Lease] = []
        with self._interruptible():
            reply = await self._http.call(
                "POST", path(self.channel, "lease"), json=self._lease_body(),
                extra_timeout=self.wait_seconds, forever=forever,
            )  # fmt: skip
            leases = cast(Sequence[Lease], reply["items"])
        self._waiting = None
        handled = 0

        async def handle(lease: Lease) -> None:
            nonlocal handled
            try:
                ran = await self._handle(lease, handler)
            except Exception:  # never let one job's trouble cancel its siblings
                log.exception("%s %s: handling the lease failed", self.channel,
                              _lease_name(lease))  # fmt: skip
                return
            handled += ran  # not `handled += await ...`: that reads `handled` before waiting

        async with anyio.create_task_group() as tg:
            for lease in leases:
                tg.start_soon(handle, lease)
        return handled

    async def _handle(self, lease: Lease, handler: AsyncHandler) -> int:
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
        arrived = anyio.current_time()
        job._renewed(started)
        if job.cancel_requested:
            await self._report(job, self._canceled_at_start(job))
            return 0
        due = arrived + renew_interval(self._lease_duration(job, server_time))
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renew, job, due)
            try:
                ending = await _async_ending(handler, job)
            finally:
                tg.cancel_scope.cancel()
        await self._report(job, ending)
        return 1

    async def _renew(self, job: AsyncJob, due: float) -> None:
        """Renew ``job``'s lease from ``due`` (``anyio.current_time()``) on; never raises,
        so it can never cancel the handler beside it."""
        failures = 0
        next_at = due
        while True:
            await anyio.sleep_until(next_at)
            try:
                reply, server_time = await self._http.call_dated(
                    "POST", path("tasks", job.id, "renew"), json=job._renew_body(), attempts=1
                )
                arrived = anyio.current_time()
                job._renewed(reply)
                interval = renew_interval(self._lease_duration(job, server_time))
            except Exception as error:
                self._renew_failed(job, error)
                if job.lease_lost:
                    return
                failures += 1
                next_at = anyio.current_time() + self._http.retry.delay(failures)
                continue
            failures = 0
            next_at = arrived + interval

    async def _report(self, job: AsyncJob, ending: HandlerResult | Exception) -> None:
        """Send the result until the gateway answers; never raises (but is cancellable)."""
        try:
            body: JSONObject | None = job._result_body(ending)
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
