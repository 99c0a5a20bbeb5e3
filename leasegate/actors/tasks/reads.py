"""Reading tasks, each message followed by its handler (one task and a task's
history are read as every queue reads them: ``leasegate.actors.queue.reads``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import check_choice, check_id, check_ids, check_page
from leasegate.actors.pages import Page, Paged, paged
from leasegate.actors.queue.reads import GetJob, serve_reads
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks.ref import Tasks
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.actors.tasks.views import TaskView, task_view
from leasegate.storage import tasks_sql as sql
from leasegate.storage.pages import page_rows

TaskStatus = Literal["queued", "leased", "running", "succeeded", "failed", "canceled",
                     "paused", "stale", "expired"]


@dataclass(frozen=True)
class GetTask(GetJob[Tasks, TaskView]):
    """A task; with ``wait``, parked until it is settled (finished, stale or paused)."""


serve_reads(TASKS, GetTask)  # and a task's history, and the ledger's settlements


@dataclass(frozen=True)
class ListTasks(Ask[Tasks, Paged[TaskView]]):
    tenant: str | None = None
    status: TaskStatus | None = None
    site: str | None = None
    account: str | None = None
    kind: str | None = None
    page: Page = Page()

    def check(self) -> None:
        if self.status is not None:
            check_choice("status", self.status, TaskStatus)
        for name, value in (("tenant", self.tenant), ("site", self.site),
                            ("account", self.account), ("kind", self.kind)):
            check_id(name, value, optional=True)
        check_page(self.page)


@TASKS.on(ListTasks)
def list_tasks(turn: TaskTurn, m: ListTasks) -> Paged[TaskView]:
    filters = {"tenant": m.tenant, "status": m.status, "site": m.site, "account": m.account,
               "kind": m.kind}
    return paged(page_rows(turn.conn, "tasks", filters, m.page.limit, m.page.offset),
                 task_view, m.page)


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
