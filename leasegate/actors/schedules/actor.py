"""Opening the schedules actor and its submitter."""

from __future__ import annotations

from leasegate.actors.jobs import Jobs
from leasegate.actors.runtime.actor import Actor, Inbox
from leasegate.actors.schedules import Schedules, records, timer
from leasegate.actors.schedules.submitter import Submitter
from leasegate.actors.schedules.turn import SCHEDULES, ScheduleTurn
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.database import Database

MODULES = (records, timer)
"""What the schedules actor does (importing a module registers its handlers)."""


def open_schedules(db: Database, clock: Clock, settings: Settings, *,
                   jobs: Jobs | None = None,
                   ) -> tuple[Actor[Schedules, ScheduleTurn], Submitter]:
    """The schedules actor on ``db`` (not running yet), and the submitter that carries
    its fires to ``jobs`` (run it with ``submit_next`` as a service)."""
    actor = Actor("schedules", Inbox(Schedules), db, clock, ScheduleTurn(settings),
                  SCHEDULES, error_log_window=settings.error_log_window)
    actor.add_job("resend_pending_fires", settings.housekeeping_interval, timer.resend_pending)
    return actor, Submitter(actor.turn.outbox, schedules=actor.ref, jobs=jobs)
