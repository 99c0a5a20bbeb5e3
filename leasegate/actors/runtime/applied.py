"""What one turn of an actor applied, kept for after its commit: the envelopes and
their results, the waiters it served or kept waiting, the effects to run, the periodic
jobs' runs and the bugs met; and how a periodic job runs inside a turn."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import outcome

from leasegate.actors.runtime.mailbox import Envelope
from leasegate.actors.runtime.periodic import PeriodicJob
from leasegate.actors.runtime.turn import Turn
from leasegate.actors.runtime.waiters import Wait
from leasegate.storage import periodic_sql
from leasegate.storage.connection import is_storage_failure, release, savepoint

C = TypeVar("C", bound=Turn)


@dataclass
class JobRun:
    job: PeriodicJob[Any]
    more: bool = False
    stack: str | None = None  # set when the run failed
    # Another gateway had claimed the run: (who, when) it ran last (None: unknown).
    elsewhere: tuple[str, float] | None = None
    skipped: bool = False


Served = list[tuple[Envelope[Any], outcome.Outcome[Any]]]


@dataclass
class TurnBatch:
    envelopes: list[Envelope[Any]]
    jobs: list[PeriodicJob[Any]]
    results: list[outcome.Outcome[Any] | None] = field(default_factory=list)
    served: Served = field(default_factory=list)
    newcomers: list[tuple[Envelope[Any], Wait]] = field(default_factory=list)  # waiting from now
    effects: list[Callable[[], None]] = field(default_factory=list)
    job_runs: list[JobRun] = field(default_factory=list)
    # (what failed, its request id, the stack): bugs met by one message or batch item
    internal_errors: list[tuple[str, str | None, str]] = field(default_factory=list)
    # Rows the commit wrote (changes undone by a savepoint do not count): only a
    # commit that wrote proves the storage works again after a failure.
    wrote: int = 0


def run_job(turn: C, job: PeriodicJob[C], now: float) -> JobRun:
    """Run an actor's periodic job inside its turn, in a savepoint of its own (an
    exception undoes the job alone). Among the gateways of one database the one that
    claims the run runs it (``periodic_sql.claim``; the claim is undone with a run that
    fails, so it stays due); a run with more to do is due again at once."""
    record = job.record
    mark = turn.mark()
    savepoint(turn.conn, "job")
    try:
        if record.gateway is not None and not periodic_sql.claim(
                turn.conn, record.key, record.gateway, now, record.every):
            release(turn.conn, "job")
            return JobRun(job, skipped=True,
                          elsewhere=periodic_sql.last_run(turn.conn, record.key))
        more = job.run(turn, now)
        if more is True and record.gateway is not None:
            periodic_sql.due_again(turn.conn, record.key, now)  # a purge behind
    except Exception as exc:
        if is_storage_failure(exc):
            raise  # fails the turn; SQLite may have rolled back already
        turn.undo("job", mark)
        return JobRun(job, stack=traceback.format_exc())
    release(turn.conn, "job")
    return JobRun(job, more=more is True)


def polled(wake: float | None, now: float, poll: float | None) -> float | None:
    """When the actor's next turn is due: at its next deadline (``wake``), and with
    several gateways on one database (``poll`` set) at least every ``poll`` seconds, so
    that the deadlines another gateway's turns wrote (a claim it gave) are met here too,
    should that gateway die."""
    if poll is None:
        return wake
    return now + poll if wake is None else min(now + poll, wake)
