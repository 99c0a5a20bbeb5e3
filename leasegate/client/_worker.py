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
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Self, cast

import httpx

from leasegate.client._batch import DEFAULT_LINGER, Outbox, submitted
from leasegate.client._errors import (
    LeasegateError,
    TransportError,
)
from leasegate.client._http import DEFAULT_TIMEOUT, Retry, SyncHTTP, path
from leasegate.client._job import (
    BaseJob,
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

    ``batch`` (2–100) takes up to ``batch`` jobs a lease call and runs their
    handlers side by side, each in a thread of its own (so the handler must be
    thread-safe), with the tasks started in one call and the results reported
    together once each has waited at most ``linger`` seconds (never past its
    lease); every per-job rule above holds for each job.
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
        batch: int = 1,
        linger: float = DEFAULT_LINGER,
    ) -> None:
        if max != 1:
            raise ValueError(
                f"Worker handles one job at a time, so max must be 1, not {max!r}: a job "
                "leased beside it would hold its lane unstarted until its claim ran out. "
                "Use batch=N (handlers in threads) or AsyncWorker to run several jobs of "
                "one lease call concurrently."
            )
        super().__init__(worker_id, channel, sites, wait_seconds, max, retry or Retry(),
                         batch, linger)
        self._http = SyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=self._retry
        )
        self._clock = wall_clock or time.time
        self._stopped = threading.Event()

    def _wall(self) -> float:
        return self._clock()

    def _now(self) -> float:
        return time.monotonic()

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
        leases, server_time = self._lease(forever=forever)
        if self.batch > 1 and leases:
            return self._run_batch(leases, server_time, handler)
        return sum(self._handle_safely(lease, handler) for lease in leases)

    def _lease(self, *, forever: bool) -> tuple[Sequence[Lease], float | None]:
        try:
            reply, server_time = self._http.call_dated(
                "POST", path(self.channel, "lease"), json=self._lease_body(),
                extra_timeout=self.wait_seconds, forever=forever, sleep=self._pause,
            )  # fmt: skip
        except _Stopped:
            return [], None
        return cast(Sequence[Lease], reply["items"]), server_time

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
        return self._run_started(job, handler, started, server_time, self._report)

    def _run_started(self, job: Job, handler: Handler, started: Mapping[str, Any],
                     server_time: float | None, report: _Report) -> int:
        """Run the handler of a started task (its start reply just came), renewing."""
        arrived = time.monotonic()
        interval = self._next_renewal(job, started, server_time)
        if job.cancel_requested:
            report(job, self._canceled_at_start(job))
            return 0
        finish_renewing = self._renew_in_background(job, arrived + interval)
        try:
            ending = _ending(handler, job)
        finally:
            finish_renewing()
        report(job, ending)
        return 1

    # ---- batches ------------------------------------------------------------------------

    def _run_batch(self, leases: Sequence[Lease], server_time: float | None,
                   handler: Handler) -> int:
        """The jobs of one lease call, started together (tasks), each handler in a thread
        of its own, the results reported together by a sender thread."""
        outbox = Outbox(self.channel, self.worker_id, self.batch, self.linger, self._retry,
                        len(leases))
        changed = threading.Condition()

        def report(job: Job, ending: HandlerResult | Exception) -> None:
            try:
                body = job._result_body(ending)
            except Exception:
                self._report_crashed(job)
                body = None
            with changed:
                if body is None:
                    outbox.ended()
                else:
                    outbox.put(job, body, time.monotonic())
                changed.notify()

        def handle(lease: Lease, start: Any) -> int:
            put = False

            def report_once(job: Job, ending: HandlerResult | Exception) -> None:
                nonlocal put
                put = True
                report(job, ending)

            try:
                return self._handle_batched(lease, server_time, start, handler, report_once)
            except Exception:
                log.exception("%s %s: handling the lease failed", self.channel,
                              _lease_name(lease))  # fmt: skip
                return 0
            finally:
                if not put:  # ended with no result to send
                    with changed:
                        outbox.ended()
                        changed.notify()

        sender = threading.Thread(target=self._send_results, args=(outbox, changed),
                                  name=f"leasegate-results-{self.worker_id}", daemon=True)
        sender.start()
        try:
            starts = self._start_all(leases)
            with ThreadPoolExecutor(len(leases), "leasegate-handler") as pool:
                handled = sum(pool.map(handle, leases, starts))
        except BaseException:
            # The sender must not wait for jobs that will never end; what is pending
            # it still sends, in the background (a daemon thread: not waited for).
            with changed:
                outbox.running = 0
                changed.notify()
            raise
        sender.join()
        return handled

    def _start_all(self, leases: Sequence[Lease]) -> list[Any]:
        """See ``AsyncWorker._start_all``."""
        if self.channel == "queries":
            return [None] * len(leases)
        body = {"worker_id": self.worker_id,
                "items": [{"task_id": lease.get("task_id"),
                           "lease_token": lease.get("lease_token")} for lease in leases]}
        try:
            reply, server_time = self._http.call_dated("POST", path("tasks", "start"), json=body)
            answers = submitted(reply, "task", len(leases))
        except (LeasegateError, TransportError) as error:
            return [error] * len(leases)
        return [a if isinstance(a, LeasegateError) else (a, server_time) for a in answers]

    def _handle_batched(self, lease: Lease, server_time: float | None, start: Any,
                        handler: Handler, report: _Report) -> int:
        job = Job(self.channel, lease, self.worker_id)
        if self.channel == "queries":
            self._leased(job, server_time)
            report(job, _ending(handler, job))
            return 1
        if isinstance(start, LeasegateError | TransportError):
            self._not_started(job, start)
            if _start_unconfirmed(start):
                self._report_not_executed(job)
            return 0
        started, server_time = start
        return self._run_started(job, handler, started, server_time, report)

    def _send_results(self, outbox: Outbox, changed: threading.Condition) -> None:
        """The sender thread: the outbox's results as they fall due, until every job has
        ended and every result is answered. Never raises."""
        try:
            while True:
                with changed:
                    while True:
                        if outbox.running <= 0 and not outbox.pending:
                            return
                        batch = outbox.next_batch(time.monotonic())
                        if batch is not None:
                            break
                        wake_at = outbox.wake_at()
                        changed.wait(None if wake_at is None
                                     else max(0.0, wake_at - time.monotonic()))
                    request = outbox.request(batch)
                try:
                    reply = self._http.call("POST", path(self.channel, "results"),
                                            json=request, forever=True)
                except LeasegateError as error:
                    log.warning("%s results: a batch of %d refused (%s); sending each alone",
                                self.channel, len(batch), error)  # fmt: skip
                    for item in batch:
                        self._send_result(item.job, item.body)
                    continue
                with changed:
                    outbox.answered(batch, reply, time.monotonic(), self._retry_refused)
        except Exception:
            log.exception("%s results: the sender failed; the leases will run out",
                          self.channel)  # fmt: skip

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
            body = job._result_body(ending)
        except Exception:
            self._report_crashed(job)
            return
        self._send_result(job, body)

    def _send_result(self, job: BaseJob, first: JSONObject) -> None:
        try:
            body: JSONObject | None = first
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


_Report = Callable[[Job, HandlerResult | Exception], None]
