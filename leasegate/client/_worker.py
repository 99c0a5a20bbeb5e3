"""Workers: lease, start, renew, report, with every retry of the protocol done right.

The rules (DESIGN.md §1), whatever the network does:

- a lease call that got no answer is repeated with the same ``request_id``
  (the gateway hands back the same unstarted lease);
- a task is started before its handler runs; if start is refused (6002: the
  claim window passed, or the task was canceled) the handler does not run;
- the handler runs at most once per lease; start, renew and result are
  repeated with the same token and the same body, never the handler;
- while a task's handler runs, the lease is renewed every third of its
  remaining time, carrying the latest checkpoint and bringing back the
  cancel and pause requests;
- the result is repeated until the gateway answers it. It is sent even when a
  renewal found the lease lost: the gateway fences it by token, and a stale
  task takes the result of its last lease (the worker knows best what
  happened). A 409 on the result is logged and given up.
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
    LeasegateError,
    QueryLeaseInvalid,
    TaskLeaseInvalid,
    TransportError,
)
from leasegate.client._http import DEFAULT_TIMEOUT, AsyncHTTP, Retry, SyncHTTP, path
from leasegate.client._job import (
    AsyncHandler,
    AsyncJob,
    BaseJob,
    Channel,
    Handler,
    HandlerResult,
    Job,
    Outcome,
    parse_time,
)
from leasegate.client._types import JSONObject

log = logging.getLogger("leasegate.client")

IDLE_PAUSE: Final = 1.0
"""``run()`` pauses this long after a lease call that came back early and empty
(a draining gateway, or ``wait_seconds=0``), so an idle worker never spins."""

MIN_RENEW_INTERVAL: Final = 0.05
EXPIRED_RENEW_INTERVAL: Final = 1.0

Lease = Mapping[str, Any]


def renew_delay(expires_at: float | None, now: float) -> float:
    """Seconds until the next renewal: a third of what is left of the lease."""
    if expires_at is None or expires_at <= now:  # expired by our clock: keep trying, gently
        return EXPIRED_RENEW_INTERVAL
    return max(MIN_RENEW_INTERVAL, (expires_at - now) / 3)


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
        else:
            log.warning("task %s: could not start, not running it (%s)", job.id, error)

    def _result_refused(self, job: BaseJob, error: LeasegateError) -> None:
        if isinstance(error, TaskLeaseInvalid | QueryLeaseInvalid):
            log.warning("%s %s: result refused, the job was taken from us (%s)",
                        job.channel, job.id, error)  # fmt: skip
        else:
            log.error("%s %s: result refused (%s)", job.channel, job.id, error)

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
    (default ``time.time``; the worker's clock should agree with the
    gateway's, as NTP makes it). ``transport`` and ``retry`` as for
    :class:`Client`.
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
        self._now = wall_clock or time.time
        self._stopped = threading.Event()

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
        return sum(self._handle(lease, handler) for lease in self._lease(forever=forever))

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

    def _handle(self, lease: Lease, handler: Handler) -> int:
        job = Job(self.channel, lease, self.worker_id)
        if self.channel == "tasks":
            try:
                started = self._http.call("POST", path("tasks", job.id, "start"), json=job._fence())
            except (LeasegateError, TransportError) as error:
                self._not_started(job, error)
                return 0
            job.lease_expires_at = parse_time(started["lease_expires_at"])
            finish_renewing = self._renew_in_background(job)
            try:
                ending = _ending(handler, job)
            finally:
                finish_renewing()
        else:
            ending = _ending(handler, job)
        self._report(job, ending)
        return 1

    def _renew_in_background(self, job: Job) -> Callable[[], None]:
        done = threading.Event()

        def renew() -> None:
            failures = 0
            delay = renew_delay(job.lease_expires_at, self._now())
            while not done.wait(delay):
                try:
                    reply = self._http.call(
                        "POST", path("tasks", job.id, "renew"), json=job._renew_body(), attempts=1
                    )
                except Exception as error:
                    self._renew_failed(job, error)
                    if job.lease_lost:
                        return
                    failures += 1
                    delay = self._http.retry.delay(failures)
                    continue
                failures = 0
                job._renewed(reply)
                delay = renew_delay(job.lease_expires_at, self._now())

        thread = threading.Thread(target=renew, name=f"leasegate-renew-{job.id}", daemon=True)
        thread.start()

        def finish() -> None:
            done.set()
            thread.join()

        return finish

    def _report(self, job: Job, ending: HandlerResult | Exception) -> None:
        body = job._result_body(ending)
        try:
            self._http.call("POST", path(self.channel, job.id, "result"), json=body, forever=True)
        except LeasegateError as error:
            self._result_refused(job, error)


class _Stopped(Exception):
    """Raised out of a retry pause when the worker is stopped."""


class AsyncWorker(_WorkerBase):
    """An asynchronous worker (anyio: runs under trio or asyncio).

    Same settings as :class:`Worker`, except that ``max`` may be 1–10: the jobs
    of one lease call are started and handled concurrently (none waits for
    another, so each is started well within its claim window), each with its
    renewals in a task of its own. The
    default ``wall_clock`` is ``time.time()`` taken once and advanced by
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

    def _now(self) -> float:
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
            ran = await self._handle(lease, handler)
            handled += ran  # not `handled += await ...`: that reads `handled` before waiting

        async with anyio.create_task_group() as tg:
            for lease in leases:
                tg.start_soon(handle, lease)
        return handled

    async def _handle(self, lease: Lease, handler: AsyncHandler) -> int:
        job = AsyncJob(self.channel, lease, self.worker_id)
        if self.channel == "tasks":
            try:
                started = await self._http.call(
                    "POST", path("tasks", job.id, "start"), json=job._fence()
                )
            except (LeasegateError, TransportError) as error:
                self._not_started(job, error)
                return 0
            job.lease_expires_at = parse_time(started["lease_expires_at"])
        async with anyio.create_task_group() as tg:
            if self.channel == "tasks":
                tg.start_soon(self._renew, job)
            try:
                ending = await _async_ending(handler, job)
            finally:
                tg.cancel_scope.cancel()
        await self._report(job, ending)
        return 1

    async def _renew(self, job: AsyncJob) -> None:
        failures = 0
        delay = renew_delay(job.lease_expires_at, self._now())
        while True:
            await anyio.sleep(delay)
            try:
                reply = await self._http.call(
                    "POST", path("tasks", job.id, "renew"), json=job._renew_body(), attempts=1
                )
            except Exception as error:
                self._renew_failed(job, error)
                if job.lease_lost:
                    return
                failures += 1
                delay = self._http.retry.delay(failures)
                continue
            failures = 0
            job._renewed(reply)
            delay = renew_delay(job.lease_expires_at, self._now())

    async def _report(self, job: AsyncJob, ending: HandlerResult | Exception) -> None:
        body = job._result_body(ending)
        try:
            await self._http.call(
                "POST", path(self.channel, job.id, "result"), json=body, forever=True
            )
        except LeasegateError as error:
            self._result_refused(job, error)
