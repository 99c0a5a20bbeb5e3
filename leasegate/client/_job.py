"""What a worker's handler gets (a job) and what it can give back (an outcome)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeAlias

import anyio

from leasegate.client._exceptions import error_detail
from leasegate.client._sendable import checked_object, sendable
from leasegate.client._types import JSONObject

log = logging.getLogger("leasegate.client")

Channel = Literal["tasks", "queries"]

def parse_time(text: str) -> float:
    """Seconds since the epoch of an API timestamp (``2026-11-30T08:00:00Z``)."""
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text).timestamp()


class Outcome(Exception):
    """An ending other than success. A handler returns or raises one of
    :class:`Failed`, :class:`Canceled` or :class:`Paused`."""

    outcome: ClassVar[str]

    def __init__(
        self,
        message: str = "",
        *,
        code: int | None = None,
        result: Any = None,
        progress: Mapping[str, Any] | None = None,
        cost: int | None = None,
    ) -> None:
        super().__init__(message)
        # Refused here, in the handler's own traceback: the gateway answers a string code
        # 400, and the result would be lost until the lease lapsed.
        if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
            raise TypeError(f"code must be an integer or None (the API's error.code), not "
                            f"{code!r}: put a name such as {code!r} in the message")
        self.message = message
        self.code = code
        self.result = result
        self.progress = progress
        self.cost = cost

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class Failed(Outcome):
    """The job failed: ``Failed("out of stock", code=17, result={...}, cost=1)``.

    For a task the gateway records it as final: tasks are never retried. A query is
    tried again after a backoff until its ``max_attempts``, unless ``retryable=False``
    (it fails at once).
    """

    outcome = "failed"

    def __init__(
        self,
        message: str,
        code: int | None = None,
        result: Any = None,
        *,
        cost: int | None = None,
        retryable: bool = True,
    ) -> None:
        super().__init__(message, code=code, result=result, cost=cost)
        self.retryable = retryable


class Snooze(Outcome):
    """The query cannot run yet: it is queued again after ``seconds`` (1–86400), and
    this attempt does not count. Return or raise ``Snooze(30)``. Queries only."""

    outcome = "snoozed"

    def __init__(self, seconds: int) -> None:
        super().__init__(f"snoozed for {seconds} s")
        self.seconds = seconds


class PermanentError(Exception):
    """Raise it (or a subclass) from a query's handler for an error that trying again
    cannot mend: the query fails at once instead of being retried. (A worker's
    ``permanent=(SomeError, ...)`` says the same of other exception types.)"""


class Canceled(Outcome):
    """The task stopped because it was asked to (``job.cancel_requested``). Tasks only."""

    outcome = "canceled"

    def __init__(self, message: str = "", *, result: Any = None, cost: int | None = None) -> None:
        super().__init__(message, result=result, cost=cost)


class Paused(Outcome):
    """A batch task stops at a checkpoint (``job.pause_requested``) and frees its lane;
    it is queued again with ``progress`` when resumed. Batch tasks only."""

    outcome = "paused"

    def __init__(self, progress: Mapping[str, Any], *, cost: int | None = None) -> None:
        super().__init__(progress=progress, cost=cost)


HandlerResult: TypeAlias = Mapping[str, Any] | Outcome | None
"""A handler returns a result dict (succeeded), None (succeeded, no result) or an
:class:`Outcome`; it may also raise an :class:`Outcome`."""


class BaseJob:
    """A leased task or query, as the handler sees it.

    ``id``, ``site``, ``account`` (tasks; None for queries), ``kind``,
    ``params``, ``attempt``, and ``progress``: the checkpoint a previous run of
    a batch task left, then whatever :meth:`set_progress` stored. ``cost``
    (default None) is reported with the result unless the outcome carries one.
    The worker sets the signals ``cancel_requested``, ``pause_requested`` (from
    lease renewals) and ``lease_lost`` (the gateway no longer counts this lease
    as current: stop touching the site as soon as you can).
    """

    def __init__(self, channel: Channel, lease: Mapping[str, Any], worker_id: str) -> None:
        self.channel: Channel = channel
        self.id: str = lease["task_id"] if channel == "tasks" else lease["query_id"]
        self.site: str = lease["site"]
        self.account: str | None = lease.get("account")
        self.kind: str = lease["kind"]
        self.params: JSONObject = lease["params"]
        self.attempt: int = lease.get("attempt", 1)
        self.worker_id = worker_id
        self.lease_token: str = lease["lease_token"]
        expires = lease.get("lease_expires_at") or lease.get("claim_expires_at")
        self.lease_expires_at: float | None = parse_time(expires) if expires else None
        """Wall time (seconds since the epoch) the current lease or claim runs out, by the
        gateway's clock (the worker's own may differ; renewals do not depend on it)."""
        self.cost: int | None = None
        self._progress: JSONObject | None = lease.get("progress")
        self._progress_set = False
        self._cancel = self._pause = self._lost = False
        self._renew_failures = 0  # renewals failed in a row (the worker's bookkeeping)
        self._due_by: float | None = None  # the lease's end on the worker's monotonic clock

    @property
    def task_id(self) -> str:
        """A task's ``id``, by the API's name for it."""
        return self._id_named("task")

    @property
    def query_id(self) -> str:
        """A query's ``id``, by the API's name for it."""
        return self._id_named("query")

    def _id_named(self, noun: str) -> str:
        """The ``id`` as ``<noun>_id``, which only a job of that channel has."""
        mine = "task" if self.channel == "tasks" else "query"
        if noun != mine:
            raise AttributeError(f"a {mine} has no {noun}_id: its id is job.id "
                                 f"(or job.{mine}_id), {self.id!r}")
        return self.id

    @property
    def progress(self) -> JSONObject | None:
        """The latest checkpoint: the previous run's, or the last :meth:`set_progress`."""
        return self._progress

    def set_progress(self, progress: Mapping[str, Any]) -> None:
        """Store a checkpoint (a JSON object); it is sent with the next renewal and with
        the result, and a later run of a paused or reclaimed batch task starts from it.

        A checkpoint the gateway would refuse (not a JSON object, NaN, nested deeper
        than 32 levels, over 64 KiB of JSON) is not stored: a WARNING is logged and
        the previous checkpoint stays. (Raising here could turn work that was done,
        an order placed, into a failure.)"""
        copied, why = checked_object(progress)
        if why is not None:
            log.warning("%s %s: checkpoint not stored, the gateway would refuse it (%s); "
                        "the previous one stays", self.channel, self.id, why)  # fmt: skip
            return
        self._progress = copied
        self._progress_set = True

    @property
    def cancel_requested(self) -> bool:
        """The upstream asked to cancel this task: end it, e.g. ``return Canceled()``."""
        return self._cancel

    @property
    def pause_requested(self) -> bool:
        """The gateway asks this batch task to pause: ``return Paused(checkpoint)``."""
        return self._pause

    @property
    def lease_lost(self) -> bool:
        """A renewal was refused (6002): the lease ran out (the task is ``stale``) or an
        operator took the task back. Stop touching the site and return what happened:
        the result is still offered, and the gateway takes it only if this was the
        task's last lease (a stale task waiting for the truth)."""
        return self._lost

    # ---- worker side ------------------------------------------------------------------

    def _signal(self) -> None:
        raise NotImplementedError

    def _renewed(self, reply: Mapping[str, Any]) -> None:
        """Take in a start or renew reply: the lease's end and the control flags (a start
        reply of an older gateway has no flags)."""
        expires = reply.get("lease_expires_at")
        if expires:
            self.lease_expires_at = parse_time(expires)
        if reply.get("cancel_requested") and not self._cancel:
            self._cancel = True
            self._signal()
        if reply.get("pause_requested") and not self._pause:
            self._pause = True
            self._signal()

    def _mark_lost(self) -> None:
        self._lost = True
        self._signal()

    def _fence(self) -> JSONObject:
        return {"worker_id": self.worker_id, "lease_token": self.lease_token}

    def _renew_body(self) -> JSONObject:
        body = self._fence()
        if self._progress_set:
            body["progress"] = self._progress
        return body

    def _result_body(self, ending: HandlerResult | Exception, *,
                     permanent: bool = False) -> JSONObject:
        """The body of ``POST .../result`` for what the handler returned or raised; built
        once, so every retry sends the same bytes.

        The body is made one the gateway takes, keeping the outcome (a succeeded
        order must never look failed: upstream might place it again). A result the
        gateway would refuse is replaced by ``{"leasegate_sdk": "result not sent:
        <why>"}``, an invalid cost or error code is left out, an over-long error
        message is truncated, and a WARNING says what changed. One exception: a pause
        whose checkpoint cannot be sent is reported ``failed`` (logged as an ERROR),
        since resuming from an older checkpoint would do work again."""
        raised: dict[str, str] | None = None
        if isinstance(ending, Exception) and not isinstance(ending, Outcome):
            raised = error_detail(ending)
            ending = Failed(raised["message"], retryable=not (
                permanent or isinstance(ending, PermanentError)))
        if isinstance(ending, Outcome) and self.channel == "queries" and ending.outcome not in (
                "failed", "snoozed"):
            ending = Failed(f"{ending!r} is not an outcome of a query")
        if isinstance(ending, Snooze) and self.channel != "queries":
            ending = Failed(f"{ending!r}: only a query can be snoozed")
        if isinstance(ending, Snooze):  # nothing else goes with it
            body = self._fence()
            body["outcome"], body["snooze_seconds"] = "snoozed", ending.seconds
            return body
        fixes: list[str] = []
        if isinstance(ending, Outcome):
            outcome = ending.outcome
            message, code, result = ending.message, ending.code, ending.result
            cost = ending.cost if ending.cost is not None else self.cost
            progress = ending.progress
        else:
            outcome, message, code = "succeeded", "", None
            result = dict(ending) if isinstance(ending, Mapping) else ending
            cost, progress = self.cost, None
        if progress is not None:
            progress, why = checked_object(progress)
            if why is not None and outcome == "paused":
                log.error("%s %s: paused, but its checkpoint cannot be sent (%s): reporting "
                          "failed rather than letting a resumed run start from an older "
                          "checkpoint and do work again", self.channel, self.id, why)  # fmt: skip
                outcome, code = "failed", None
                message = (f"paused, but the checkpoint could not be sent ({why}); failed "
                           "rather than resumed from an older checkpoint")  # fmt: skip
            elif why is not None:
                fixes.append(f"progress not sent: {why}")
        if progress is None and self._progress_set:
            progress = self._progress  # stored by set_progress: already checked
        sent = sendable(result, cost, code, str(message), fixes)
        if fixes:
            log.warning("%s %s: the %s result was changed so that the gateway takes it: %s",
                        self.channel, self.id, outcome, "; ".join(fixes))  # fmt: skip
        body = self._fence()
        body["outcome"] = outcome
        final = isinstance(ending, Failed) and not ending.retryable and self.channel == "queries"
        if sent.message or sent.code is not None or final:
            error: JSONObject = {"message": sent.message}
            if sent.code is not None:
                error["code"] = sent.code
            if raised is not None:
                error["type"], error["traceback"] = raised["type"], raised["traceback"]
            if final:
                error["retryable"] = False
            body["error"] = error
        if sent.result is not None:
            body["result"] = sent.result
        if sent.cost is not None:
            body["cost"] = sent.cost
        if self.channel == "tasks" and progress is not None:
            body["progress"] = progress
        return body


class Job(BaseJob):
    """The job a :class:`Worker`'s handler gets (see :class:`BaseJob` for its fields)."""

    def __init__(self, channel: Channel, lease: Mapping[str, Any], worker_id: str) -> None:
        super().__init__(channel, lease, worker_id)
        self._event = threading.Event()

    def wait_cancel_or_pause(self, timeout: float | None = None) -> bool:
        """Block until cancel or pause is requested or the lease is lost, or ``timeout``
        seconds pass; True if one of those happened. Also a stoppable ``sleep``."""
        return self._event.wait(timeout)

    def _signal(self) -> None:
        self._event.set()


class AsyncJob(BaseJob):
    """The job an :class:`AsyncWorker`'s handler gets (see :class:`BaseJob` for its fields)."""

    def __init__(self, channel: Channel, lease: Mapping[str, Any], worker_id: str) -> None:
        super().__init__(channel, lease, worker_id)
        # Made when first waited for: most handlers never wait, and an event per job
        # was a good part of a job's cost to the worker.
        self._event: anyio.Event | None = None

    async def wait_cancel_or_pause(self) -> None:
        """Return when cancel or pause is requested or the lease is lost. Combine with
        ``anyio.move_on_after`` or a task group to race it against the work."""
        if self._event is None:
            self._event = anyio.Event()
            if self._cancel or self._pause or self._lost:  # signalled before any wait
                self._event.set()
        await self._event.wait()

    def _signal(self) -> None:
        if self._event is not None:
            self._event.set()


Handler: TypeAlias = Callable[[Job], HandlerResult]
AsyncHandler: TypeAlias = Callable[[AsyncJob], Awaitable[HandlerResult]]
