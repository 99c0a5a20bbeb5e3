"""The turn context: what a handler works with while its message is applied.

An actor applies the messages waiting in its inbox in one transaction, a *turn*.
Every handler takes the actor's turn context and its message::

    @TASKS.on(StartTask)
    def start(turn: TaskTurn, m: StartTask) -> Started:
        row = tasks_sql.JOBS.get(turn.conn, m.task_id)  # the turn's connection
        ...; turn.history.record(m.task_id, "started")
        turn.work_may_be_available(*new_work(row["site"]))
        return Started(...)

:class:`Turn` holds what the runtime gives every actor: the connection, the
turn's one instant (:attr:`Turn.now`), wake-ups for waiting requests, effects to
run after the commit, and savepoints for the items of a batch. An actor's own
context derives from it and adds the actor's long-lived state as plain fields
(its settings, its history recorder, its artifact store...), so what a handler
depends on is written in its parameter's type.

Everything here runs on the database thread while the actor's task waits for
it, so one thread at a time touches it: no locks. It reads the time from
:attr:`now` (fixed on the trio side for the whole turn), never from the clock:
trio's clock is not readable off its thread, and one turn sees one instant.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, TypeVar

import outcome
import trio

from leasegate.actors.runtime.mailbox import Message
from leasegate.errors import InternalError, LeasegateError
from leasegate.storage.connection import is_storage_failure, release, savepoint, undo
from leasegate.storage.engine import Connection

C = TypeVar("C", bound="Turn")
M = TypeVar("M", bound=Message)
M_contra = TypeVar("M_contra", contravariant=True)
R = TypeVar("R")

log = logging.getLogger("leasegate.actors")


SetBased = Callable[[C, Sequence[M]], Sequence[R | LeasegateError]]
"""A batch's items applied at once (see :meth:`Turn.each`): an answer per item, in
order; a domain error as an answer only for an item that wrote nothing."""


class RetryItemByItem(Exception):
    """Raised by a :data:`SetBased` that cannot answer its batch at once: the batch is
    applied again item by item (nothing of the attempt kept)."""


def checked(items: Sequence[M]) -> Sequence[M]:
    """A :data:`SetBased` application's first step, before it writes anything: every item's
    checks (one raises: the batch is then applied item by item, each failing alone)."""
    for item in items:
        item.check()
    return items


def checked_once_each(items: Sequence[M], job: Callable[[M], Hashable], twice: str) -> None:
    """:func:`checked`, and no job twice (the answers would depend on the order:
    ``twice`` says which; :class:`RetryItemByItem` is raised)."""
    jobs = [job(item) for item in checked(items)]
    if len(set(jobs)) < len(jobs):
        raise RetryItemByItem(twice)


def answer_of_one(answers: Sequence[R | LeasegateError]) -> R:
    """The answer of a batch of one, as a handler of one message gives it: a refusal
    raised (one and many applied by the same code never part)."""
    answer = answers[0]
    if isinstance(answer, LeasegateError):
        raise answer
    return answer


class Receiver(Protocol[M_contra]):
    """What takes a message without waiting: the ``Ref`` of an actor that takes it."""

    def tell_nowait(self, message: M_contra, /) -> None: ...


class Turn:
    """The runtime's part of every actor's turn context (see the module docstring).

    The runtime sets :attr:`conn`, :attr:`now` and :attr:`number` at the start of
    each turn; the rest of the fields below the line are the runtime's own.
    """

    conn: Connection
    """The actor's connection, inside the turn's transaction."""

    def __init__(self, actor: str) -> None:
        self.actor = actor  # the actor's name, for log lines
        self.now = 0.0  # the turn's instant (wall seconds)
        self.number = 0  # counts turns, failed ones too: "within this transaction"
        self.draining = False  # the actor drains for shutdown: nothing new waits
        # ---- the runtime's: this turn's effects, bugs, wake-ups, request
        self.effects: list[Callable[[], None]] = []
        self.bugs: list[tuple[str, str | None, str]] = []
        self.wake: set[Hashable] = set()
        self.wake_all = False
        # What this turn's own writes woke, for other gateways (see heard_elsewhere).
        self.announce: set[Hashable] = set()
        self.announce_all = False
        self.request_id: str | None = None  # of the message being applied
        self.undone = 0  # rows this turn's undone savepoints had changed
        self.retried = 0  # batches of this turn undone to be applied again item by item
        # Set by the runtime while nothing but the turn's locks is in its transaction:
        # the next message needs no savepoint (see in_savepoint).
        self.restart: Callable[[], None] | None = None

    def work_may_be_available(self, *topics: Hashable) -> None:
        """Offer the messages waiting on any of ``topics`` another try in this
        transaction; no topics: every waiting message."""
        if topics:
            self.wake.update(topics)
            self.announce.update(topics)
        else:
            self.wake_all = self.announce_all = True

    def heard_elsewhere(self, *topics: Hashable) -> None:
        """As :meth:`work_may_be_available`, for work another gateway made (its
        notification): offered to the waiting messages here, never announced again
        (which would echo between gateways)."""
        if topics:
            self.wake.update(topics)
        else:
            self.wake_all = True

    def left_for_others(self) -> set[Hashable]:
        """Of :attr:`announce`, what other gateways' parked requests still need to hear
        of once this turn commits: all of it here; a kind of turn that knows what its
        own parked requests took says less."""
        return set(self.announce)

    def after_commit(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` on the trio thread once the current message's commit is
        durable (with the commit pipeline: after its WAL sync, between two turns), just
        before the turn's replies.

        Dropped if the message rolls back or the commit fails.
        """
        self.effects.append(effect)

    def tell_after_commit(self, ref: Receiver[M], message: M, lost: str) -> None:
        """Tell another actor ``message`` once the current message's commit is durable
        (see :meth:`after_commit`), without waiting; when its inbox is full (or it
        closed at shutdown), log ``lost``, which says what repairs it."""
        actor = self.actor

        def tell() -> None:
            try:
                ref.tell_nowait(message)
            except (trio.WouldBlock, LeasegateError):
                log.warning("%s: %s", actor, lost)

        self.effects.append(tell)

    def each(self: C, items: Sequence[M], apply: Callable[[C, M], R],
             set_based: SetBased[C, M, R] | None = None) -> tuple[R | LeasegateError, ...]:
        """The items of a batch message, each answered as if in its own savepoint, as
        the runtime applies a message: a domain error or a bug (500, logged) is that
        item's answer alone, never the others'.

        All in one savepoint first (most batches have no failing item: two statements
        a batch, not two an item), by ``set_based`` (set-based: a statement for all the
        items, each item's domain error its answer, provided it wrote nothing) or else
        ``apply`` to each item in turn; whatever raises undoes them all, and the batch
        is applied again item by item, each in a savepoint of its own."""
        if len(items) > 1:
            done = self._all_at_once(items, set_based or _one_by_one(apply))
            if done is not None:
                return done
        answers: list[R | LeasegateError] = []
        for item in items:
            def step(item: M = item) -> R:
                item.check()
                return apply(self, item)

            done_one = self.in_savepoint("item", f"{type(item).__name__} in a batch", step)
            if isinstance(done_one, outcome.Error):
                assert isinstance(done_one.error, LeasegateError)  # all in_savepoint answers
                answers.append(done_one.error)
            else:
                answers.append(done_one.unwrap())
        return tuple(answers)

    def _all_at_once(self: C, items: Sequence[M], set_based: SetBased[C, M, R],
                     ) -> tuple[R | LeasegateError, ...] | None:
        """Every item in one savepoint, or None (nothing of them kept) if one raised."""
        conn = self.conn
        mark = self.mark()
        savepoint(conn, "items")
        try:
            answers = tuple(set_based(self, items))
        except Exception as exc:
            if is_storage_failure(exc):
                raise
            self.undo("items", mark)
            self.retried += 1  # what the undone items cached for this turn is void
            return None
        release(conn, "items")
        return answers

    def in_savepoint(self, name: str, what: str, step: Callable[[], R]) -> outcome.Outcome[R]:
        """``step`` in a savepoint of its own: a domain error undoes it and is its
        answer; a bug undoes it, is logged after the turn and answers 500; a storage
        failure fails the whole turn (SQLite may already have rolled it back:
        SQLITE_FULL, IOERR). A message, or one item of a batch message."""
        conn = self.conn
        mark = self.mark()
        # First in its transaction (``restart`` set): undoing it is restarting the
        # transaction, so the happy path saves SAVEPOINT and RELEASE, two of the
        # handful of round trips a one-message turn makes on PostgreSQL.
        restart, self.restart = self.restart, None
        if restart is None:
            savepoint(conn, name)
        try:
            value = step()
        except LeasegateError as exc:
            self._undo_step(name, mark, restart)
            return outcome.Error(exc)
        except Exception as exc:
            if is_storage_failure(exc):
                raise
            self._undo_step(name, mark, restart)
            self.bugs.append((what, self.request_id, traceback.format_exc()))
            return outcome.Error(InternalError(
                f"internal error (request {self.request_id or '-'}); see the server log"))
        if restart is None:
            release(conn, name)
        return outcome.Value(value)

    def _undo_step(self, name: str, mark: tuple[int, int, int],
                   restart: Callable[[], None] | None) -> None:
        if restart is None:
            self.undo(name, mark)
            return
        effects, changes, undone = mark
        restart()
        del self.effects[effects:]
        self.undone = undone + self.conn.total_changes - changes

    def mark(self) -> tuple[int, int, int]:
        """What a savepoint made now must restore: (effects, the connection's total
        changes, the changes undone so far)."""
        return len(self.effects), self.conn.total_changes, self.undone

    def undo(self, name: str, mark: tuple[int, int, int]) -> None:
        """Roll back to savepoint ``name``, made at ``mark``: drop the effects queued
        since, and count every change since as undone (those of savepoints inside it
        included), so that only a commit that wrote counts as one (see the runtime)."""
        effects, changes, undone = mark
        undo(self.conn, name)
        del self.effects[effects:]
        self.undone = undone + self.conn.total_changes - changes

    def begin(self, conn: Connection, now: float) -> None:
        """The runtime starts a turn (on the database thread)."""
        self.conn = conn
        self.now = now
        self.number += 1
        self.effects = []
        self.bugs = []
        self.undone = 0
        self.retried = 0
        self.wake_all, self.wake = False, set()
        self.announce_all, self.announce = False, set()


def _one_by_one(apply: Callable[[C, M], R]) -> SetBased[C, M, R]:
    """Each item applied in turn; the first that fails raises (none is answered)."""
    def one_by_one(turn: C, items: Sequence[M]) -> tuple[R, ...]:
        answers = []
        for item in items:
            item.check()
            answers.append(apply(turn, item))
        return tuple(answers)

    return one_by_one
