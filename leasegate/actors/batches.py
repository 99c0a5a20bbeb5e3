"""Batches: many requests of one kind in one message, each answered on its own.

A batch is one message, so it is applied in one turn and committed in the
turn's one group commit; inside it, every item gets its own savepoint, just as
the runtime gives every message of a turn its own: a domain error (or a bug)
met by one item rolls back that item alone and becomes that item's answer,
never the others'. The reply lists one entry per item, in order: the item's
reply, or the :class:`LeasegateError` it met::

    @dataclass(frozen=True)
    class SubmitTasks(Batch[SubmitTask, TaskSubmitted]):
        item = SubmitTask

    case SubmitTasks():
        return self.each(conn, message.items, self._submit_one)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Generic, TypeVar

import outcome

from leasegate.actors.mailbox import Ask, Message
from leasegate.errors import InvalidRequest, LeasegateError

MAX_BATCH: Final = 100
"""The most items one batch takes (submits, starts, results)."""

M = TypeVar("M", bound=Message)
R = TypeVar("R")

def check_batch_size(count: int) -> None:
    if not 1 <= count <= MAX_BATCH:
        raise InvalidRequest(f"a batch takes 1 to {MAX_BATCH} items, not {count}")


@dataclass(frozen=True)
class Batch(Ask[tuple[R | LeasegateError, ...]], Generic[M, R]):
    """Up to :data:`MAX_BATCH` requests; each item is checked in its own savepoint (a
    bad one is that item's 400, not the batch's)."""

    items: tuple[M, ...]
    item: ClassVar[type[Message]] = Message  # what every item must be

    def check(self) -> None:
        if not isinstance(self.items, tuple):
            raise InvalidRequest("items must be a tuple of messages")
        check_batch_size(len(self.items))
        for item in self.items:
            if not isinstance(item, self.item):
                raise InvalidRequest(f"every item must be a {self.item.__name__}, "
                                     f"not {type(item).__name__}")


class EachItem:
    """A mixin for actors: :meth:`each` applies the items of a batch one savepoint each."""

    if TYPE_CHECKING:  # provided by the Actor base
        def in_savepoint(self, conn: sqlite3.Connection, name: str, what: str,
                         step: Callable[[], R]) -> outcome.Outcome[R]: ...

    def each(self, conn: sqlite3.Connection, items: Sequence[M],
             apply: Callable[[sqlite3.Connection, M], R]) -> tuple[R | LeasegateError, ...]:
        """Each item in its own savepoint, as the runtime applies a message: a domain
        error or a bug (500, logged) is that item's answer alone."""
        answers: list[R | LeasegateError] = []
        for item in items:
            def step(item: M = item) -> R:
                item.check()
                return apply(conn, item)

            done = self.in_savepoint(conn, "item", f"{type(item).__name__} in a batch", step)
            if isinstance(done, outcome.Error):
                assert isinstance(done.error, LeasegateError)  # all in_savepoint answers
                answers.append(done.error)
            else:
                answers.append(done.unwrap())
        return tuple(answers)

