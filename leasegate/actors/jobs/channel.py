"""One job channel as the routes use it: its queue, the submit saga with its hold,
and every job view with its ``billing``.

    jobs.tasks.submit(SubmitTask(...))              # 402 when the hold is short
    jobs.tasks.get("t1", tenant, wait_seconds=20)   # a TaskView, billing filled in
    jobs.queries.ask_each(QueryResults, items)       # a batch's views, billed

The saga runs in the caller's task, not in an actor: hold first, then enqueue,
release on refusal. For a batch, all the holds go in one ledger message and one
commit, then one enqueue message; the refused items' holds are released, so one
item short of funds is that item's 402 alone.

``billing`` comes from the ledger's hold (one ask per view, page or batch, only
when a job has ``max_cost``): the queue actors cannot ask the ledger inside a
turn, and a copy of the hold kept in the job row could disagree with the ledger;
the ledger is the truth.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import Field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import trio

from leasegate.actors.channels import JobQueue
from leasegate.actors.ledger import LedgerRef
from leasegate.actors.ledger.holds import HoldsOf, PlaceHold, PlaceHolds, ReleaseHold
from leasegate.actors.ledger.views import HoldPlaced, HoldView
from leasegate.actors.pages import Paged
from leasegate.actors.queue.history import History
from leasegate.actors.queue.reads import GetHistory
from leasegate.actors.queue.submissions import Submit, new_id
from leasegate.actors.queue.turn import JobKind
from leasegate.actors.runtime.batches import ask_each, check_batch_size
from leasegate.actors.runtime.mailbox import Ask, Message, Ref
from leasegate.actors.views import Billing
from leasegate.errors import LeasegateError
from leasegate.logs import escape

log = logging.getLogger("leasegate.billing")

RELEASE_SECONDS = 5.0  # how long a refused submit may spend releasing its hold


class JobView(Protocol):
    """What a channel's job view is: a dataclass with its id and ``billing``
    (``max_cost`` only, as the queue knows it, until the ledger's part is filled in)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def job_id(self) -> str: ...

    @property
    def billing(self) -> Billing | None: ...


class Submitted(Protocol):
    """A submit's reply: ``created`` False for an identical replay."""

    @property
    def created(self) -> bool: ...


A = TypeVar("A", bound=JobQueue)
M = TypeVar("M", bound=Message)
Sub = TypeVar("Sub", bound=Submitted)
V = TypeVar("V", bound=JobView)


class JobChannel(Generic[A, Sub, V]):
    """The channel of ``kind``: its queue's ref (tag ``A``), whose submits answer
    ``Sub`` and whose jobs read as ``V``, and the ledger that holds their money."""

    def __init__(self, kind: JobKind, queue: Ref[A], ledger: LedgerRef, *,
                 max_wait: float, get: Callable[[str, str | None, bool], Ask[A, V]],
                 submit_many: Callable[[tuple[Any, ...]],
                                       Ask[A, tuple[Sub | LeasegateError, ...]]]) -> None:
        self.kind = kind
        self.queue = queue
        self.ledger = ledger
        self.max_wait = max_wait  # the longest a read waits (max_wait_seconds)
        self._get = get  # GetTask(job_id, tenant, wait)
        self._submit_many = submit_many  # SubmitTasks(items)

    # ---- the submit saga ----

    async def submit(self, message: Submit[A, Sub]) -> Sub:
        """Submit a job; with ``max_cost``, hold it on the tenant's account first."""
        max_cost = message.max_cost
        if max_cost is None:
            return await self.queue.ask(message)
        message.check()  # a bad field is refused before any money moves
        # The id is chosen before the hold: the hold is named by it. A generated id has 96
        # random bits; the queue treats it like a client's, so a collision (never) is a
        # 6004 and the hold is released, never a replay of someone else's job.
        if message.job_id is None:
            message = message.with_job_id(new_id(self.kind.id_prefix))
        job_id = message.job_id
        assert job_id is not None
        placed = await self.ledger.ask(self._hold(message, job_id, max_cost))
        try:
            return await self.queue.ask(message)
        except LeasegateError:
            if placed.created:
                await self._release(job_id)
            raise

    async def submit_many(self, items: Sequence[Submit[A, Sub] | LeasegateError],
                          ) -> list[Sub | LeasegateError]:
        """Submit up to 100 jobs (an item already refused at the edge stays refused): the
        saga of :meth:`submit` for each item with ``max_cost``, in one enqueue."""
        check_batch_size(len(items))
        answers: list[Sub | LeasegateError | None] = [
            item if isinstance(item, LeasegateError) else None for item in items]
        messages: dict[int, Submit[A, Sub]] = {}
        for i, item in enumerate(items):
            if isinstance(item, LeasegateError):
                continue
            if item.max_cost is not None:
                try:
                    item.check()  # a bad field is refused before any money moves
                except LeasegateError as exc:
                    answers[i] = exc
                    continue
                if item.job_id is None:  # the hold is named by the id: chosen first
                    item = item.with_job_id(new_id(self.kind.id_prefix))
            messages[i] = item
        placed = await self._hold_many(messages, answers)
        enqueue = [i for i in messages if answers[i] is None]
        try:
            if enqueue:
                replies = await self.queue.ask(self._submit_many(
                    tuple(messages[i] for i in enqueue)))
                for i, reply in zip(enqueue, replies, strict=True):
                    answers[i] = reply
        finally:
            # Refused items give their holds back; all of them do if the whole message was
            # refused (storage trouble, shutting down: nothing enqueued, the call fails).
            refused = [i for i, hold in placed.items() if hold.created
                       and (answers[i] is None or isinstance(answers[i], LeasegateError))]
            async with trio.open_nursery() as nursery:
                for i in refused:
                    job_id = messages[i].job_id
                    assert job_id is not None
                    nursery.start_soon(self._release, job_id)
        done = [answer for answer in answers if answer is not None]
        assert len(done) == len(items)
        return done

    async def _hold_many(self, messages: dict[int, Submit[A, Sub]],
                         answers: list[Sub | LeasegateError | None]) -> dict[int, HoldPlaced]:
        """One message for all the holds: one turn of the ledger, one commit (a crash
        leaves all of them or none), each placed in request order (an earlier item is
        served first when funds run short) and answered on its own; a refused hold is
        its item's answer."""
        held = [i for i, m in messages.items() if m.max_cost is not None]
        placed: dict[int, HoldPlaced] = {}
        if not held:
            return placed
        holds = []
        for i in held:
            m = messages[i]
            assert m.job_id is not None and m.max_cost is not None
            holds.append(self._hold(m, m.job_id, m.max_cost))
        for i, answer in zip(held, await self.ledger.ask(PlaceHolds(tuple(holds))),
                             strict=True):
            if isinstance(answer, LeasegateError):
                answers[i] = answer
            else:
                placed[i] = answer
        return placed

    def _hold(self, message: Submit[A, Sub], job_id: str, max_cost: int) -> PlaceHold:
        return PlaceHold(self.kind.channel, job_id, message.tenant, max_cost)

    async def _release(self, job_id: str) -> None:
        # Shielded: a caller that goes away now must not leave the money held until
        # the orphan age (it would be repaired then, but not at once).
        with trio.move_on_after(RELEASE_SECONDS, shield=True):
            try:
                await self.ledger.ask(ReleaseHold(self.kind.channel, job_id))
            except LeasegateError as exc:
                log.warning("hold of refused %s %s not released (recovery will): %s",
                            self.kind.noun, escape(job_id), exc)

    # ---- jobs with their billing ----

    async def get(self, job_id: str, tenant: str | None, *, wait_seconds: float = 0) -> V:
        """``GET /v1/<jobs>/{id}?wait_seconds=``: the job once it is settled (the actor
        keeps the read waiting until then), or as it is when the wait runs out (or at once
        when ``wait_seconds`` is 0; never longer than ``max_wait``). A reply lost to a
        gone caller costs nothing: a read."""
        if wait_seconds > 0:
            deadline = trio.current_time() + min(wait_seconds, self.max_wait)
            found = await self.queue.ask_until(self._get(job_id, tenant, True),
                                                deadline=deadline, give_back=lambda _: None,
                                                on_timeout=None)
            if found is not None:
                return await self._billed(found)
        return await self._billed(await self.queue.ask(self._get(job_id, tenant, False)))

    async def ask(self, message: Ask[A, V]) -> V:
        """Ask the queue for one job (a read, a control, a result) and show it billed."""
        return await self._billed(await self.queue.ask(message))

    async def page(self, message: Ask[A, Paged[V]]) -> Paged[V]:
        """A page of jobs, each billed (one ask of the ledger for the page)."""
        page = await self.queue.ask(message)
        holds = await self._holds(page.items)
        if not holds:
            return page
        return dataclasses.replace(page, items=tuple(_billed(view, holds)
                                                     for view in page.items))

    async def ask_each(self,
                       batch: Callable[[tuple[M, ...]], Ask[A, tuple[V | LeasegateError, ...]]],
                       items: Sequence[M | LeasegateError]) -> list[V | LeasegateError]:
        """A batch's answers (``runtime.batches.ask_each``), each job view billed (one
        ask of the ledger for the batch); the errors as they are. The settles were told
        after the queue's commit, so they are ahead of this ask in the ledger's inbox."""
        return await self.billed_each(await ask_each(self.queue, batch, items))

    async def billed_each(self, answers: list[V | LeasegateError]) -> list[V | LeasegateError]:
        """A batch's answers, each job view billed (one ask of the ledger for them all)."""
        holds = await self._holds([a for a in answers if not isinstance(a, LeasegateError)])
        if not holds:
            return answers
        return [a if isinstance(a, LeasegateError) else _billed(a, holds) for a in answers]

    async def history(self, job_id: str, tenant: str | None) -> History:
        """A job's history, oldest first (another tenant's job is not found)."""
        return await self.queue.ask(GetHistory(job_id, tenant))

    async def _billed(self, view: V) -> V:
        holds = await self._holds((view,))
        return _billed(view, holds) if holds else view  # no hold: as the queue has it

    async def _holds(self, views: Sequence[V]) -> dict[str, HoldView]:
        """The ledger's holds of the views that have ``max_cost`` (no ask without one)."""
        ids = tuple(view.job_id for view in views if view.billing is not None)
        if not ids:
            return {}
        holds = await self.ledger.ask(HoldsOf(self.kind.channel, ids))
        return {hold.ref: hold for hold in holds}


def _billed(view: V, holds: dict[str, HoldView]) -> V:
    if view.billing is None:
        return view
    hold = holds.get(view.job_id)
    if hold is None:  # no hold (released, or never placed): nothing moved
        billing = Billing(view.billing.max_cost, None, None, None)
    else:
        billing = Billing(view.billing.max_cost, hold.charged, hold.refunded, hold.status)
    return dataclasses.replace(view, billing=billing)
