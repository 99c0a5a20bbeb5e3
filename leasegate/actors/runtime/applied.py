"""What one turn of an actor applied, kept for after its commit: the envelopes and
their results, the waiters it served or parked, the effects to run, the periodic
jobs' runs and the bugs met."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import outcome

from leasegate.actors.runtime.mailbox import Envelope
from leasegate.actors.runtime.parking import Wait
from leasegate.actors.runtime.periodic import PeriodicJob


@dataclass
class JobRun:
    job: PeriodicJob[Any]
    more: bool = False
    stack: str | None = None  # set when the run failed


Served = list[tuple[Envelope[Any], outcome.Outcome[Any]]]


@dataclass
class TurnBatch:
    envelopes: list[Envelope[Any]]
    jobs: list[PeriodicJob[Any]]
    results: list[outcome.Outcome[Any] | None] = field(default_factory=list)
    served: Served = field(default_factory=list)
    newcomers: list[tuple[Envelope[Any], Wait]] = field(default_factory=list)  # parked now
    effects: list[Callable[[], None]] = field(default_factory=list)
    job_runs: list[JobRun] = field(default_factory=list)
    # (what failed, its request id, the stack): bugs met by one message or batch item
    internal_errors: list[tuple[str, str | None, str]] = field(default_factory=list)
    # Rows the commit wrote (changes undone by a savepoint do not count): only a
    # commit that wrote proves the storage works again after a failure.
    wrote: int = 0
