"""Periodic jobs: one record of each job's runs, and one guarded runner for all.

Two kinds: an actor's own (:class:`PeriodicJob`, run inside one of its turns, in
a savepoint of its own) and the system's background jobs (:func:`run_guarded`).

A job fails alone: an exception is counted and logged at most
once per ``error_log_window`` (with how many failures that line stands for
and the stack tail), and the job runs again next time. The counters live on
the trio thread; readers take a frozen :class:`JobStatistics`::

    job = JobRecord("sweep_staging", owner="artifacts", every=60.0)
    nursery.start_soon(run_guarded, job, clock, window, sweep)   # await sweep(now)
    job.statistics().runs

A job is *overdue* when it has not completed a run for :data:`OVERDUE_INTERVALS`
of its intervals, counted from its last successful run, or from start-up while
it has none yet (a failed run does not count: a job that fails every time is
overdue too). Jobs that run on demand (``every`` infinite, such as the file
deleter, or data-driven timers) are never overdue.
"""

from __future__ import annotations

import contextlib
import logging
import math
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

from leasegate.clock import Clock

log = logging.getLogger("leasegate.jobs")

C = TypeVar("C")

OVERDUE_INTERVALS = 3


@dataclass(frozen=True)
class JobStatistics:
    """A snapshot of one job, for /health and /metrics."""

    owner: str
    name: str
    every: float
    runs: int
    failures: int
    last_run_at: float | None
    last_failure_at: float | None
    next_run_at: float | None
    started_at: float | None
    last_run_by: str | None = None  # the gateway that ran it last (this one or another)

    def overdue(self, now: float) -> bool:
        """Whether no run has succeeded for three intervals (see the module docstring)."""
        since = self.last_run_at if self.last_run_at is not None else self.started_at
        if since is None or math.isinf(self.every):
            return False
        return now - since > OVERDUE_INTERVALS * self.every


class JobRecord:
    """What one job has done. Mutated only on the trio thread."""

    def __init__(self, name: str, *, owner: str, every: float) -> None:
        self.name = name
        self.owner = owner
        self.every = every
        self.next_at: float | None = None
        self.started_at: float | None = None  # when the system started running it
        self.runs = 0
        self.failures = 0
        self.last_run_at: float | None = None
        self.last_failure_at: float | None = None
        self.more = False  # the last run said it has more to do (a purge behind)
        # Set by the system: this gateway's name, for a job whose runs are claimed in
        # the database so that one gateway among those of the database runs each.
        self.gateway: str | None = None
        self.last_run_by: str | None = None
        self._logged_at = -math.inf
        self._unlogged = 0

    @property
    def key(self) -> str:
        """The job's name among every gateway's (``periodic_runs.job``)."""
        return f"{self.owner}.{self.name}"

    def succeeded(self, now: float, *, more: bool = False) -> None:
        self.runs += 1
        self.last_run_at = now
        self.last_run_by = self.gateway
        self.more = more

    def ran_elsewhere(self, last: tuple[str, float] | None) -> None:
        """Another gateway had claimed this run: it was ``last = (gateway, when)``. Not
        a run of ours, but the job is not overdue for it."""
        self.more = False
        if last is not None:
            by, at = last
            if self.last_run_at is None or at >= self.last_run_at:
                self.last_run_at, self.last_run_by = at, by

    def failed(self, now: float, window: float, stack: str) -> None:
        """Count a failure; log it, with ``stack``'s tail, at most once per ``window``."""
        self.failures += 1
        self.last_failure_at = now
        self._unlogged += 1
        if now - self._logged_at >= window:
            log.warning("%s: periodic job %s failed (%d times since the last report); "
                        "it runs again next time:\n%s",
                        self.owner, self.name, self._unlogged, stack[-600:])
            self._logged_at = now
            self._unlogged = 0

    def statistics(self) -> JobStatistics:
        return JobStatistics(self.owner, self.name, self.every, self.runs, self.failures,
                             self.last_run_at, self.last_failure_at, self.next_at,
                             self.started_at, self.last_run_by)


@dataclass
class PeriodicJob(Generic[C]):
    """A job an actor runs on its own timer, in its own savepoint, inside a turn
    (``run(turn, now)``; ``turn`` is the actor's turn context).

    ``every`` is the interval in seconds; a run that returns True (more to do,
    e.g. a purge that hit its batch size) runs again after about a second. An
    exception rolls back the job's savepoint alone; it is counted and logged
    by its :class:`JobRecord` once the turn is over, and the job runs again
    next time: it never takes the actor down.
    """

    record: JobRecord
    run: Callable[[C, float], bool | None]

    @property
    def name(self) -> str:
        return self.record.name


Claim = Callable[[float], Awaitable[bool | tuple[str, float] | None]]
"""``await claim(now)``: True when the run due at ``now`` is this gateway's to run, else
who ran it last (``(gateway, when)`` or None); see ``periodic_sql.claim``."""


async def run_guarded(job: JobRecord, clock: Clock, window: float,
                      fn: Callable[[float], Awaitable[object]], *,
                      claim: Claim | None = None,
                      give_back: Callable[[float], Awaitable[None]] | None = None) -> None:
    """Run ``await fn(now)`` every ``job.every`` seconds, forever; a failure is the
    job's alone. With ``claim``, only the runs this gateway claims (the others are
    another gateway's); a failed run is given back (``give_back(now)``) for another
    gateway to run. Cancellation: stops between or during runs (a run holds nothing
    that must finish)."""
    while True:
        job.next_at = clock.now() + job.every
        await trio.sleep_until(clock.deadline(job.next_at))
        try:
            if claim is not None:
                claimed = await claim(clock.now())
                if claimed is not True:
                    job.ran_elsewhere(claimed or None)
                    continue
            await fn(clock.now())
        except Exception:
            job.failed(clock.now(), window, traceback.format_exc())
            if give_back is not None:
                with contextlib.suppress(Exception):  # the storage failing: it stays due
                    await give_back(clock.now())
        else:
            job.succeeded(clock.now())  # when it completed: a hung run is no run


async def serve_guarded(job: JobRecord, clock: Clock, window: float,
                        step: Callable[[], Awaitable[bool]]) -> None:
    """Run ``await step()`` until it returns False (its source is closed); each step
    counts as a run, and a failing step is counted and logged but never ends the
    loop. For work that comes from a queue, such as file deletions."""
    while True:
        try:
            if not await step():
                return
        except Exception:
            job.failed(clock.now(), window, traceback.format_exc())
        else:
            job.succeeded(clock.now())
