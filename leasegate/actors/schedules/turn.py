"""The schedules actor's turn context and handler registry, and the outbox of the
fires its turns claimed, waiting for their submit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from leasegate.actors.runtime.background import Outbox
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.periodic import JobRecord
from leasegate.actors.runtime.turn import Turn
from leasegate.actors.schedules import Schedules
from leasegate.settings import Settings

Channel = Literal["task", "query"]
Overlap = Literal["skip", "allow"]
CatchUp = Literal["latest", "none", "all"]
FireStatus = Literal["submitted", "skipped", "failed"]  # and "pending" until then

FireKey = tuple[str, float]  # (schedule_id, fire_at)


@dataclass(frozen=True)
class PendingFire:
    """A claimed fire: the job to submit, and what decides whether it is."""

    tenant: str
    schedule_id: str
    fire_at: float
    job_id: str
    channel: Channel
    template: dict[str, Any]
    previous_job_id: str | None  # skip while this one is unfinished (overlap "skip")


class ScheduleTurn(Turn):
    """The runtime's turn, the settings, the outbox of claimed fires, and the record
    of the timer that claims them (for /health and /metrics)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("schedules")
        self.settings = settings
        # Bounded by the table: at most 100 fires of a schedule at once, and
        # max_schedules_per_tenant schedules a tenant.
        self.outbox: Outbox[FireKey, PendingFire] = Outbox(
            lambda item: (item.schedule_id, item.fire_at))
        self.timer = JobRecord("claim_due_fires", owner="schedules", every=math.inf)


SCHEDULES = Handlers(Schedules, ScheduleTurn)
"""What the schedules actor does with each message (filled in by ``records.py``)."""
