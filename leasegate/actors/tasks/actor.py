"""Opening the task actor."""

from __future__ import annotations

from leasegate.actors.event_stream import EventHub
from leasegate.actors.ledger import LedgerRef
from leasegate.actors.runtime.actor import Actor, Inbox
from leasegate.actors.tasks import (
    Tasks,
    artifacts,
    control,
    deadlines,
    device_actions,
    fenced,
    lease,
    operator,
    presence,
    reads,
    submit,
)
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.artifacts import ArtifactStore
from leasegate.storage.database import Database

MODULES = (submit, reads, lease, fenced, control, device_actions, artifacts, presence,
           deadlines, operator)
"""What the task actor does, module by module (importing one registers its handlers)."""


def open_tasks(db: Database, clock: Clock, settings: Settings,
               artifact_store: ArtifactStore | None = None, *,
               inbox: Inbox[Tasks] | None = None,
               ledger: LedgerRef | None = None,
               events: EventHub | None = None) -> Actor[Tasks, TaskTurn]:
    """The task actor on ``db`` (not running yet), keeping artifacts in ``artifact_store``,
    settling holds with ``ledger`` and streaming its events to ``events``."""
    turn = TaskTurn(settings, artifact_store, ledger=ledger, events=events)
    actor = Actor("tasks", inbox or Inbox(Tasks), db, clock, turn, TASKS,
                  error_log_window=settings.error_log_window)
    actor.add_job("purge_tasks", settings.housekeeping_interval, deadlines.purge)
    return actor
