"""Reading tasks, each message followed by its handler (one task and a task's
history are read as every queue reads them: ``leasegate.actors.queue.reads``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import check_choice, check_id, check_ids
from leasegate.actors.pages import JobPage
from leasegate.actors.queue.reads import GetJob, serve_reads
from leasegate.actors.queue.search import SearchJobs, run_search
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.actors.tasks.views import TaskView, task_view
from leasegate.storage import tasks_sql as sql

TaskStatus = Literal["queued", "leased", "running", "succeeded", "failed", "canceled",
                     "paused", "stale", "expired"]


@dataclass(frozen=True)
class GetTask(GetJob[Tasks, TaskView]):
    """A task; with ``wait``, it waits until it is settled (finished, stale or paused)."""


serve_reads(TASKS, GetTask)  # and a task's history, and the ledger's settlements


@dataclass(frozen=True)
class ListTasks(SearchJobs[Tasks, TaskView]):
    """Tasks, newest first, that match every filter given (``queue.search``)."""

    status: TaskStatus | None = None
    account: str | None = None

    def check(self) -> None:
        check_choice("status", self.status, TaskStatus, optional=True)
        check_id("account", self.account, optional=True)
        super().check()


@TASKS.on(ListTasks)
def list_tasks(turn: TaskTurn, m: ListTasks) -> JobPage[TaskView]:
    return run_search(turn.conn, "tasks", "task_id", m,
                      {"status": m.status, "account": m.account}, task_view)


@dataclass(frozen=True)
class CountTasks(Ask[Tasks, tuple[tuple[str, int], ...]]):
    """Unfinished tasks by status, (status, count) in lifecycle order (each status
    counted on its own index: no scan of the finished tasks kept for retention)."""


@TASKS.on(CountTasks)
def count(turn: TaskTurn, m: CountTasks) -> tuple[tuple[str, int], ...]:
    return sql.count_unfinished(turn.conn)


@dataclass(frozen=True)
class ExistingTasks(Ask[Tasks, frozenset[str]]):
    """The subset of ``task_ids`` that have a task record (for the orphan sweep)."""

    task_ids: tuple[str, ...]

    def check(self) -> None:
        check_ids("task_ids", self.task_ids, most=10_000, optional=False)


@TASKS.on(ExistingTasks)
def existing(turn: TaskTurn, m: ExistingTasks) -> frozenset[str]:
    return frozenset(sql.existing(turn.conn, list(m.task_ids)))
