"""Where the queues meet the ledger: the submit saga, settle notices, jobs' ``billing``.

The arrows go one way only, queues → ledger (see ``leasegate.actors.ledger``
for the saga's crash points and what repairs each):

- :func:`submit_task` / :func:`submit_query` run in the caller's task (the HTTP
  request), not in an actor: hold first, then enqueue, release on refusal;
  :func:`submit_tasks` / :func:`submit_queries` do the same for a batch, item by
  item (all holds in one ledger message and commit, one enqueue message, the
  refused items' holds released), so one item short of funds is that item's 402
  alone;
- :class:`SettleNotices` is how a queue actor tells the ledger a job ended,
  after its commit, never waiting (a full ledger inbox loses the notice;
  recovery settles the hold from the job's row);
- :func:`with_billing` fills a job view's ``billing`` from the ledger's hold
  (one ask per view or page, only when a job has ``max_cost``): the queue
  actors cannot ask the ledger inside a turn, and a copy of the hold kept in
  the job row could disagree with the ledger; the ledger is the truth.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import TypeVar

import trio

from leasegate.actors.batches import Batch, check_batch_size
from leasegate.actors.channels import Channel
from leasegate.actors.ledger.holds import HoldsOf, PlaceHold, PlaceHolds, ReleaseHold, Settle
from leasegate.actors.ledger.ref import LedgerRef
from leasegate.actors.ledger.views import HoldPlaced, HoldView
from leasegate.actors.legacy_runtime import Actor
from leasegate.actors.mailbox import Mailbox
from leasegate.actors.pages import Paged
from leasegate.actors.query_messages import SubmitQueries, SubmitQuery
from leasegate.actors.query_views import QuerySubmitted, QueryView
from leasegate.actors.submissions import new_id
from leasegate.actors.task_messages import SubmitTask, SubmitTasks
from leasegate.actors.task_views import TaskSubmitted, TaskView
from leasegate.actors.views import Billing
from leasegate.errors import LeasegateError
from leasegate.logs import escape

log = logging.getLogger("leasegate.billing")

RELEASE_SECONDS = 5.0  # how long a refused submit may spend releasing its hold


# ---- the submit saga --------------------------------------------------------------

async def submit_task(tasks: Mailbox, ledger: LedgerRef, message: SubmitTask) -> TaskSubmitted:
    """Submit a task; with ``max_cost``, hold it on the tenant's account first."""
    max_cost = message.max_cost
    if max_cost is None:
        return await tasks.ask(message)
    message.check()  # a bad field is refused before any money moves
    # The id is chosen before the hold: the hold is named by it. A generated id has 96
    # random bits; the queue treats it like a client's, so a collision (never) is a
    # 6004 and the hold is released, never a replay of someone else's task.
    message = dataclasses.replace(message, task_id=message.task_id or new_id("t"))
    assert message.task_id is not None
    placed = await ledger.ask(PlaceHold("task", message.task_id, message.tenant, max_cost))
    try:
        return await tasks.ask(message)
    except LeasegateError:
        if placed.created:
            await _release(ledger, "task", message.task_id)
        raise


async def submit_query(queries: Mailbox, ledger: LedgerRef,
                       message: SubmitQuery) -> QuerySubmitted:
    """Submit a query; with ``max_cost``, hold it on the tenant's account first."""
    max_cost = message.max_cost
    if max_cost is None:
        return await queries.ask(message)
    message.check()
    message = dataclasses.replace(message, query_id=message.query_id or new_id("q"))
    assert message.query_id is not None
    placed = await ledger.ask(PlaceHold("query", message.query_id, message.tenant,
                                        max_cost))
    try:
        return await queries.ask(message)
    except LeasegateError:
        if placed.created:
            await _release(ledger, "query", message.query_id)
        raise


S = TypeVar("S", SubmitTask, SubmitQuery)
A = TypeVar("A", TaskSubmitted, QuerySubmitted)


async def submit_tasks(tasks: Mailbox, ledger: LedgerRef,
                       items: Sequence[SubmitTask | LeasegateError],
                       ) -> list[TaskSubmitted | LeasegateError]:
    """Submit up to 100 tasks (an item already refused at the edge stays refused): the
    saga of :func:`submit_task` for each item with ``max_cost``, in one enqueue."""
    return await _submit_many(
        "task", tasks, ledger, items, SubmitTasks,
        lambda m: m.task_id, lambda m: dataclasses.replace(m, task_id=new_id("t")))


async def submit_queries(queries: Mailbox, ledger: LedgerRef,
                         items: Sequence[SubmitQuery | LeasegateError],
                         ) -> list[QuerySubmitted | LeasegateError]:
    """Submit up to 100 queries: :func:`submit_tasks` for the query channel."""
    return await _submit_many(
        "query", queries, ledger, items, SubmitQueries,
        lambda m: m.query_id, lambda m: dataclasses.replace(m, query_id=new_id("q")))


async def _submit_many(channel: Channel, queue: Mailbox, ledger: LedgerRef,
                       items: Sequence[S | LeasegateError],
                       batch: Callable[[tuple[S, ...]], Batch[S, A]],
                       job_id: Callable[[S], str | None], with_new_id: Callable[[S], S],
                       ) -> list[A | LeasegateError]:
    check_batch_size(len(items))
    answers: list[A | LeasegateError | None] = [
        item if isinstance(item, LeasegateError) else None for item in items]
    messages: dict[int, S] = {}
    for i, item in enumerate(items):
        if isinstance(item, LeasegateError):
            continue
        if item.max_cost is not None:
            try:
                item.check()  # a bad field is refused before any money moves
            except LeasegateError as exc:
                answers[i] = exc
                continue
            if job_id(item) is None:  # the hold is named by the id: chosen first
                item = with_new_id(item)
        messages[i] = item
    placed: dict[int, HoldPlaced] = {}
    # One message for all the holds: one turn of the ledger, one commit (a crash leaves
    # all of them or none), each placed in request order (an earlier item is served
    # first when funds run short) and answered on its own.
    held = [i for i, m in messages.items() if m.max_cost is not None]
    if held:
        holds = PlaceHolds(tuple(_hold_of(channel, messages[i], job_id) for i in held))
        for i, answer in zip(held, await ledger.ask(holds), strict=True):
            if isinstance(answer, LeasegateError):
                answers[i] = answer
            else:
                placed[i] = answer
    enqueue = [i for i in messages if answers[i] is None]
    try:
        if enqueue:
            replies = await queue.ask(batch(tuple(messages[i] for i in enqueue)))
            for i, reply in zip(enqueue, replies, strict=True):
                answers[i] = reply
    finally:
        # Refused items give their holds back; all of them do if the whole message was
        # refused (storage trouble, shutting down: nothing enqueued, the call fails).
        refused = [i for i, hold in placed.items() if hold.created
                   and not isinstance(answers[i], TaskSubmitted | QuerySubmitted)]
        async with trio.open_nursery() as nursery:
            for i in refused:
                jid = job_id(messages[i])
                assert jid is not None
                nursery.start_soon(_release, ledger, channel, jid)
    done = [answer for answer in answers if answer is not None]
    assert len(done) == len(items)
    return done


def _hold_of(channel: Channel, m: S, job_id: Callable[[S], str | None]) -> PlaceHold:
    jid = job_id(m)
    assert jid is not None and m.max_cost is not None
    return PlaceHold(channel, jid, m.tenant, m.max_cost)


async def _release(ledger: LedgerRef, channel: Channel, job_id: str) -> None:
    # Shielded: a caller that goes away now must not leave the money held until
    # the orphan age (it would be repaired then, but not at once).
    with trio.move_on_after(RELEASE_SECONDS, shield=True):
        try:
            await ledger.ask(ReleaseHold(channel, job_id))
        except LeasegateError as exc:
            log.warning("hold of refused %s %s not released (recovery will): %s",
                        channel, escape(job_id), exc)


# ---- settle notices from the queue actors ----------------------------------------

class SettleNotices:
    """A queue actor's way to tell the ledger that jobs ended, once they are committed."""

    def __init__(self, actor: Actor, channel: Channel, ledger: LedgerRef | None) -> None:
        self.actor = actor
        self.channel: Channel = channel
        self.ledger = ledger

    def ended(self, row: sqlite3.Row | None, terminal: tuple[str, ...]) -> None:
        """Call inside the turn with the job's row after a change; a terminal job with
        ``max_cost`` is settled after the commit."""
        if self.ledger is None or row is None or row["max_cost"] is None:
            return
        status = row["status"]
        if status not in terminal:
            return
        job_id = row[f"{self.channel}_id"]
        self.actor.tell_after_commit(
            self.ledger, Settle(self.channel, job_id, status, row["cost"]),
            f"settle of {self.channel} {escape(job_id)} not delivered; recovery will settle it")


# ---- billing in job views ----------------------------------------------------------

J = TypeVar("J", TaskView, QueryView)


def _job_id(view: TaskView | QueryView) -> str:
    return view.task_id if isinstance(view, TaskView) else view.query_id


def _billed(view: J, holds: dict[str, HoldView]) -> J:
    if view.billing is None:
        return view
    hold = holds.get(_job_id(view))
    if hold is None:  # no hold (released, or never placed): nothing moved
        billing = Billing(view.billing.max_cost, None, None, None)
    else:
        billing = Billing(view.billing.max_cost, hold.charged, hold.refunded, hold.status)
    return dataclasses.replace(view, billing=billing)


async def with_billing(ledger: LedgerRef, view: J) -> J:
    """``view`` with its ``billing`` as the ledger has it."""
    if view.billing is None:
        return view
    channel: Channel = "task" if isinstance(view, TaskView) else "query"
    holds = await ledger.ask(HoldsOf(channel, (_job_id(view),)))
    return _billed(view, {hold.ref: hold for hold in holds})


async def page_with_billing(ledger: LedgerRef, channel: Channel, page: Paged[J]) -> Paged[J]:
    """Every job of ``page`` with its ``billing`` (one ask for the page)."""
    ids = tuple(_job_id(view) for view in page.items if view.billing is not None)
    if not ids:
        return page
    holds = {hold.ref: hold for hold in await ledger.ask(HoldsOf(channel, ids))}
    return dataclasses.replace(page, items=tuple(_billed(view, holds) for view in page.items))


async def many_with_billing(ledger: LedgerRef, channel: Channel,
                            answers: Sequence[J | LeasegateError]) -> list[J | LeasegateError]:
    """A batch's answers with each job view's ``billing`` (one ask for the batch); the
    errors as they are."""
    ids = tuple(_job_id(a) for a in answers
                if not isinstance(a, LeasegateError) and a.billing is not None)
    if not ids:
        return list(answers)
    holds = {hold.ref: hold for hold in await ledger.ask(HoldsOf(channel, ids))}
    return [a if isinstance(a, LeasegateError) else _billed(a, holds) for a in answers]
