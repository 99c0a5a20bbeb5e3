"""The actor seam, as mypy must check it: each line below that breaks it carries
``# type: ignore[<code>]``, and mypy runs with ``warn_unused_ignores`` (``make test``),
so the suite fails the day one of them stops being an error.

Nothing here runs: the functions are never called, and the handlers are registered
on a registry of this module's own (the real actors' stay untouched even if this
module were imported). That a handler's message parameter names the message it is
registered for is checked at import instead (``Handlers.on``; ``test_runtime``).
"""

from __future__ import annotations

from leasegate.actors.jobs import Jobs
from leasegate.actors.ledger import LedgerRef
from leasegate.actors.ledger.holds import PlaceHold
from leasegate.actors.queries import QueriesRef
from leasegate.actors.queries.lease import ReleaseQueryLeases
from leasegate.actors.queries.reads import GetQuery
from leasegate.actors.queries.submit import SubmitQuery
from leasegate.actors.queries.views import QueryView
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.tasks import Tasks, TasksRef
from leasegate.actors.tasks.lease import LeaseTasks, release_message
from leasegate.actors.tasks.reads import GetTask
from leasegate.actors.tasks.turn import TaskTurn

HANDLERS = Handlers(Tasks, TaskTurn)


async def messages_to_the_wrong_actor(tasks: TasksRef, ledger: LedgerRef) -> None:
    await tasks.ask(GetQuery("q1"))  # type: ignore[arg-type]
    await ledger.ask(GetTask("t1"))  # type: ignore[arg-type]
    await tasks.ask(PlaceHold("task", "t1", "ten", 5))  # type: ignore[arg-type]
    tasks.tell_nowait(ReleaseQueryLeases((("q1", "token"),)))  # type: ignore[arg-type]


async def replies_assigned_to_the_wrong_type(tasks: TasksRef) -> None:
    view: QueryView = await tasks.ask(GetTask("t1"))  # type: ignore[arg-type]
    count: int = await tasks.ask(GetTask("t1"))  # type: ignore[arg-type]
    del view, count


def handlers_registered_wrong() -> None:
    @HANDLERS.on(GetTask)  # type: ignore[arg-type]
    def returns_the_wrong_type(turn: TaskTurn, m: GetTask) -> QueryView:
        raise NotImplementedError

    @HANDLERS.on(GetQuery)  # type: ignore[arg-type]
    def handles_another_actors_message(turn: TaskTurn, m: GetQuery) -> QueryView:
        raise NotImplementedError


def ledger_and_tasks_swapped_in_the_facade(tasks: TasksRef, queries: QueriesRef,
                                           ledger: LedgerRef) -> Jobs:
    return Jobs(tasks=ledger, queries=queries, ledger=tasks, max_wait=30)  # type: ignore[arg-type]


async def the_facade_asked_across_channels(jobs: Jobs) -> None:
    await jobs.tasks.submit(SubmitQuery("ten", "shop", "balance"))  # type: ignore[arg-type]
    await jobs.queries.ask(GetTask("t1"))  # type: ignore[arg-type]


async def a_long_poll_of_the_wrong_actor(queries: QueriesRef) -> None:
    await queries.ask_until(LeaseTasks("w1", wait=True),  # type: ignore[arg-type]
                             deadline=0.0, give_back=release_message,  # type: ignore[arg-type]
                             on_timeout=())
