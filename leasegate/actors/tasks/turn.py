"""The task actor's table, turn context and handler registry."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from leasegate.actors.attempts import outcome_error, with_error
from leasegate.actors.payloads import canonical_json
from leasegate.actors.queue.turn import JobKind, QueueTurn
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.periodic import JobRecord
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.views import TaskView, task_view
from leasegate.errors import TaskNotFound
from leasegate.settings import Settings
from leasegate.storage import presence_sql
from leasegate.storage import tasks_sql as sql
from leasegate.storage.artifacts import ArtifactStore
from leasegate.storage.engine import Row

if TYPE_CHECKING:
    from leasegate.actors.event_stream import EventHub
    from leasegate.actors.ledger import LedgerRef

SETTLED: Final = (*sql.TERMINAL, "stale", "paused")
"""Where a task waits for nobody but a person: a ``GET ?wait_seconds`` returns there."""

TASK_KIND: Final = JobKind(
    actor="tasks", channel="task", noun="task", id_prefix="t", id_column="task_id",
    settled=SETTLED, terminal=sql.TERMINAL, jobs=sql.JOBS, not_found=TaskNotFound)
"""Tasks as the code both queues share reads them."""


class TaskTurn(QueueTurn[TaskView]):
    """What both queues keep (see ``QueueTurn``), and the task actor's own: its
    artifact store, the workers seen this turn, how far passed ``not_before`` times
    have woken the waiting leases, and the record of its deadline timer."""

    def __init__(self, settings: Settings, artifacts: ArtifactStore | None = None, *,
                 ledger: LedgerRef | None = None, events: EventHub | None = None) -> None:
        super().__init__(TASK_KIND, settings, ledger=ledger, events=events)
        self.artifacts = artifacts
        self.seen_in_turn: tuple[tuple[int, int], set[str]] = ((-1, 0), set())
        self.not_before_seen = -math.inf
        # The exact timer of on_wakeup (claims, leases, hard timeouts, task_ttl): runs
        # when the data says, so it is listed with the on-demand jobs (never overdue).
        self.deadline_timer = JobRecord("deadlines", owner="tasks", every=math.inf)

    def view(self, row: Row) -> TaskView:
        return task_view(row)

    def ttl_deadline(self, not_before: float | None) -> float:
        """``task_ttl`` counts from now, or from ``not_before`` if that is later."""
        start = self.now if not_before is None else max(self.now, not_before)
        return start + self.settings.task_ttl

    def retry_expiry(self, row: Row) -> float:
        """``task_ttl`` from now, or from the task's ``not_before`` if that is later."""
        return self.ttl_deadline(row["not_before"])

    def kept_errors(self, row: Row) -> str | None:
        """The task's errors, its last attempt's added: a retry clears the outcome but
        keeps why each attempt failed."""
        current = outcome_error(row)
        return row["errors"] if current is None else with_error(row["errors"], current)

    def seen(self, worker_id: str, *, sites: tuple[str, ...] | None = None,
             key_id: str | None = None, leasing: bool = False) -> None:
        """The worker is there (a lease, start, renewal or result): its presence. A
        lease call also records the sites it serves and its key."""
        if leasing:
            text = None if sites is None else canonical_json(list(sites))
            presence_sql.seen(self.conn, worker_id, self.now, sites=text, update_sites=True,
                              key_id=key_id)
            return
        # Once a turn per worker: a batch of 100 starts or results is one sighting.
        # (Presence is a hint: should the item that wrote it be rolled back, the
        # worker's next call writes it.)
        # A batch undone to be applied again item by item (``Turn.each``) sees again.
        turn, seen = self.seen_in_turn
        if turn != (self.number, self.retried):
            seen = set()
            self.seen_in_turn = ((self.number, self.retried), seen)
        if worker_id in seen:
            return
        seen.add(worker_id)
        presence_sql.seen(self.conn, worker_id, self.now)


def requeue_status(row: Row) -> str:
    """Where an unstarted task goes back to: a pending pause request is honoured."""
    if row["pause_requested"] and row["batch_total"] is not None:
        return "paused"
    return "queued"


TASKS = Handlers(Tasks, TaskTurn)
"""What the task actor does with each message (filled in by its message modules)."""
