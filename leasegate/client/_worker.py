"""The synchronous :class:`Worker`: its own steps, with blocking calls and a renewal thread.

The rules of the protocol and the decisions both workers share are in ``_protocol``
(:class:`_WorkerBase`); this module only takes the steps (lease, start, renew,
report). ``_async_worker`` takes the same steps with ``await``: the two mirror each
other, so a change to one belongs in the other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Self, cast

import httpx

from leasegate.client._errors import (
    LeasegateError,
    TransportError,
)
from leasegate.client._http import DEFAULT_TIMEOUT, Retry, SyncHTTP, path
from leasegate.client._job import (
    Channel,
    Failed,
    Handler,
    HandlerResult,
    Job,
)
from leasegate.client._protocol import (
    IDLE_PAUSE,
    NOT_EXECUTED,
    UNCONFIRMED_START_REPORTS,
    Lease,
    _ending,
    _lease_name,
    _start_unconfirmed,
    _Stopped,
    _WorkerBase,
)
from leasegate.client._types import JSONObject

log = logging.getLogger("leasegate.client")


def _interrupted(error: BaseException) -> bool:
    """A KeyboardInterrupt (Ctrl-C), alone or in exception groups (trio wraps it)."""
    if isinstance(error, BaseExceptionGroup):
        return all(_interrupted(inner) for inner in error.exceptions)
    return isinstance(error, KeyboardInterrupt)


def _log_interrupted(worker_id: str) -> None:
    """One line, no traceback. Nothing is given back: a lease not yet started comes back
    after the claim window, a started task becomes ``stale`` when its lease lapses (its
    handler may have acted), a query is redelivered when its lease lapses."""
    log.warning("leasegate worker %s: interrupted, stopped; what it held is left to its "
                "lease (claim window; a started task becomes stale)", worker_id)


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
        super().__init__(worker_id, channel, sites, wait_seconds, max, retry or Retry())
        self._http = SyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=self._retry
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
        retried for ever; an error answer to a lease (bad key, bad site) is raised.
        Ctrl-C (KeyboardInterrupt) ends it at once: one warning line, and ``run``
        returns; the job in hand is not reported (see :func:`_log_interrupted`)."""
        try:
            while not self._stopped.is_set():
                began = time.monotonic()
                handled = self._run_once(handler, forever=True)
                if self._idle(handled, time.monotonic() - began):
                    self._stopped.wait(IDLE_PAUSE)
        except KeyboardInterrupt:
            self._stopped.set()
            _log_interrupted(self.worker_id)

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
        interval = self._next_renewal(job, started, server_time)
        if job.cancel_requested:
            self._report(job, self._canceled_at_start(job))
            return 0
        finish_renewing = self._renew_in_background(job, arrived + interval)
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
            next_at = due
            while not done.wait(max(0.0, next_at - time.monotonic())):
                try:
                    reply, server_time = self._http.call_dated(
                        "POST", path("tasks", job.id, "renew"), json=job._renew_body(), attempts=1
                    )
                    arrived = time.monotonic()
                    next_at = arrived + self._next_renewal(job, reply, server_time)
                except Exception as error:
                    delay = self._renew_retry(job, error)
                    if delay is None:
                        return
                    next_at = time.monotonic() + delay

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
