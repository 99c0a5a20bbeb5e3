"""Workers: lease, start, renew, report, with every retry of the protocol done right.

This module holds the rules and the decisions both workers share
(:class:`_WorkerBase`); the steps themselves are written once, in
``_async/worker.py`` (:class:`AsyncWorker`), from which ``scripts/sync_sdk.py``
generates ``_sync/worker.py`` (:class:`Worker`).

The rules, whatever the network does:

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
- the handler runs at most once per lease; start and result are repeated
  (no answer, a 5xx, a 429) with the same token and the same body, never the
  handler. A renewal is sent once; after a failure the next one follows the
  retry pause (at least a 429's ``Retry-After``), with the latest checkpoint;
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
  knows best what happened). Any other answer (an error not retried: 409,
  400, ...) is logged and given up, except a first 413: nothing was recorded,
  so the outcome is sent once more, under the same token, with a slimmed
  body (the result replaced by a note, the checkpoint left out; not for a
  pause, see :func:`_slimmed`);
- an error while handling or reporting one job is logged and never cancels
  or skips another job of the same lease call; an unexpected error while
  sending a batch of results gives up that batch's results (logged), and no
  other job's;
- with ``batch`` (2–100), a lease call takes up to ``batch`` jobs, the tasks
  among them are started in one call (each start still answered on its own:
  a handler runs only if its own start was taken), and results go out
  together (see ``_batch.Outbox``): a result waits at most ``linger`` for
  others, never past its lease, and each is fenced and answered on its own,
  with the same decisions as a single result. Renewals stay one per job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from leasegate.client._batch import DEFAULT_LINGER, MAX_BATCH, Pending
from leasegate.client._errors import (
    InvalidRequest,
    LeasegateError,
    PayloadTooLarge,
    QueryLeaseInvalid,
    StateConflict,
    TaskLeaseInvalid,
    TransportError,
)
from leasegate.client._http import Retry, new_id, retryable
from leasegate.client._job import BaseJob, Canceled, Channel, HandlerResult
from leasegate.client._sendable import NOT_SENT
from leasegate.client._types import JSONObject

log = logging.getLogger("leasegate.client")

IDLE_PAUSE: Final = 1.0
"""``run()`` pauses this long after a lease call that came back early and empty
(a draining gateway, or ``wait_seconds=0``), so an idle worker never spins."""

GATHER_BELOW: Final = 10
"""A lease call that brought fewer jobs than this is followed by a gathering pause (see
``_WorkerBase._gathering``); from ten on, a lease call costs a tenth of a request a job
or less, and the pause would add only latency (in ``bench/lifecycle.py``'s batched
modes, whose lease calls bring dozens, it cost batched queries 8-22% of their jobs a
second)."""

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
        return retryable(error)
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


def interrupted(error: BaseException) -> bool:
    """A KeyboardInterrupt (Ctrl-C), alone or in exception groups (trio wraps it)."""
    if isinstance(error, BaseExceptionGroup):
        return all(interrupted(inner) for inner in error.exceptions)
    return isinstance(error, KeyboardInterrupt)


def log_interrupted(worker_id: str) -> None:
    """One line, no traceback. Nothing is given back: a lease not yet started comes back
    after the claim window, a started task becomes ``stale`` when its lease lapses (its
    handler may have acted), a query is redelivered when its lease lapses."""
    log.warning("leasegate worker %s: interrupted, stopped; what it held is left to its "
                "lease (claim window; a started task becomes stale)", worker_id)


class _WorkerBase:
    """What both workers share: the settings, the lease-length bookkeeping (and so
    when to renew), the decisions (renew again or give up, re-send a refused
    result or not) and their logs. The message bodies live on :class:`BaseJob`."""

    def __init__(
        self,
        worker_id: str,
        channel: Channel,
        sites: Iterable[str] | None,
        wait_seconds: float,
        max: int,
        retry: Retry,
        batch: int = 1,
        linger: float = DEFAULT_LINGER,
    ) -> None:
        if channel not in ("tasks", "queries"):
            raise ValueError(f"channel must be 'tasks' or 'queries', not {channel!r}")
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"batch must be 1 to {MAX_BATCH}, not {batch!r}")
        if batch > 1 and max not in (1, batch):
            raise ValueError(f"batch={batch} leases up to {batch} jobs a call; leave max "
                             f"at 1 (not {max!r})")
        if not 0 <= linger <= 1:
            raise ValueError(f"linger must be 0 to 1 second, not {linger!r}")
        self.batch = batch
        self.linger = linger
        # exceptions a query fails with at once (never retried); set by the worker
        self.permanent: tuple[type[BaseException], ...] = ()
        max = batch if batch > 1 else max
        self.worker_id = worker_id
        self.channel: Channel = channel
        self.sites: list[str] | None = None if sites is None else list(sites)
        self.wait_seconds = wait_seconds
        self.max = max
        self._retry = retry
        self._lease_ttl: float | None = None  # a task lease's length, by the gateway's clock

    def _wall(self) -> float:
        """The worker's wall clock (seconds since the epoch)."""
        raise NotImplementedError

    def _gathering(self, carried: Sequence[Pending], leased: int) -> float:
        """How long ``run``'s next lease call, which carries ``carried`` (the results of
        the jobs of a lease call that brought ``leased``), waits before it goes (with
        ``batch``). A lease call that came back with fewer than :data:`GATHER_BELOW`
        jobs (and short of ``max``) found no backlog: the results wait out their linger
        (never past their lease: ``Pending.due_at``), and the work submitted meanwhile
        comes back on the same call instead of one call each (a long-poll answers as
        soon as one job is there). Any other leases again at once."""
        if self.batch == 1 or not carried or leased >= min(self.max, GATHER_BELOW):
            return 0.0
        return max(0.0, min(p.due_at for p in carried) - self._now())

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

    def _next_renewal(
        self, job: BaseJob, reply: Mapping[str, Any], server_time: float | None
    ) -> float:
        """Take in a start or renew reply (the lease's end, the cancel and pause
        requests; ``server_time``: its ``Date``) and return the seconds from its arrival
        to the next renewal."""
        job._renewed(reply)
        duration = self._lease_duration(job, server_time)
        if duration is not None:
            job._due_by = self._now() + duration
        interval = renew_interval(duration)
        job._renew_failures = 0
        return interval

    def _now(self) -> float:
        """The worker's monotonic clock (what renewals and results are timed by)."""
        raise NotImplementedError

    def _leased(self, job: BaseJob, server_time: float | None) -> None:
        """A query's lease just came (its reply's ``Date``: ``server_time``): when it
        ends on the worker's clock, so that its result is never held past it."""
        if job.lease_expires_at is not None and server_time is not None:
            job._due_by = self._now() + job.lease_expires_at - server_time

    def _renew_retry(self, job: BaseJob, error: Exception) -> float | None:
        """After a renewal failed (logged): the pause before the next one (the retry
        pause, at least a 429's ``Retry-After``, but never longer than a renewal's own
        interval, or the lease would lapse while we wait), or None if the lease is lost."""
        self._renew_failed(job, error)
        if job.lease_lost:
            return None
        job._renew_failures += 1
        retry_after = error.retry_after if isinstance(error, LeasegateError) else None
        return min(self._retry.delay(job._renew_failures, retry_after),
                   renew_interval(self._lease_ttl))

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
        elif isinstance(error, StateConflict | InvalidRequest) and body["outcome"] == "paused":
            # 409 (6003) from the gateway, 400 from one older than that
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

    def _result_body(self, job: BaseJob, ending: HandlerResult | Exception) -> JSONObject | None:
        """The result to send for what the handler returned or raised, or None if it could
        not be made (logged: the job is not reported)."""
        try:
            return job._result_body(ending, permanent=isinstance(ending, self.permanent))
        except Exception:
            self._report_crashed(job)
            return None

    def _renew_failed(self, job: BaseJob, error: Exception) -> None:
        if isinstance(error, TaskLeaseInvalid):
            log.warning("task %s: lease lost (%s)", job.id, error)
            job._mark_lost()
        elif isinstance(error, LeasegateError | TransportError):
            log.warning("task %s: renew failed (%s)", job.id, error)
        else:
            log.error("task %s: renew failed", job.id, exc_info=error)


class Stopped(Exception):
    """Raised out of a retry pause when the worker is stopped."""
