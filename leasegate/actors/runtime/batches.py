"""Batches: many requests of one kind in one message, each answered on its own.

A batch is one message, so it is applied in one turn and committed in the
turn's one group commit. Its items are applied all at once first (set-based where
the handler gives a ``set_based``: one statement for all of them); when one of them
fails, the batch is applied again with every item in its own savepoint, just as the
runtime gives every message of a turn its own (:meth:`Turn.each`): a domain error
(or a bug) met by one item rolls back that item alone and becomes that item's
answer, never the others'. The reply lists one entry per item, in order: the
item's reply, or the :class:`LeasegateError` it met::

    @dataclass(frozen=True)
    class SubmitTasks(Batch[Tasks, SubmitTask, TaskSubmitted]):
        item = SubmitTask

    TASKS.each(SubmitTasks, submit, submit_all)  # submit: the handler of one item
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Generic, TypeVar

from leasegate.actors.runtime.mailbox import Ask, Message, Ref
from leasegate.errors import InvalidRequest, LeasegateError

MAX_BATCH: Final = 100
"""The most items one batch takes (submits, starts, results)."""

A = TypeVar("A")
A_contra = TypeVar("A_contra", contravariant=True)
M = TypeVar("M", bound=Message)
R = TypeVar("R")


def check_batch_size(count: int) -> None:
    if not 1 <= count <= MAX_BATCH:
        raise InvalidRequest(f"a batch takes 1 to {MAX_BATCH} items, not {count}")


def check_messages(messages: object, kind: type[Message], what: str) -> None:
    """A batch's ``messages`` (each a ``what``: "item", "result"): a tuple of 1 to
    :data:`MAX_BATCH` messages, every one a ``kind``."""
    if not isinstance(messages, tuple):
        raise InvalidRequest(f"{what}s must be a tuple of messages")
    check_batch_size(len(messages))
    for message in messages:
        if not isinstance(message, kind):
            raise InvalidRequest(f"every {what} must be a {kind.__name__}, "
                                 f"not {type(message).__name__}")


@dataclass(frozen=True)
class Batch(Ask[A_contra, tuple[R | LeasegateError, ...]], Generic[A_contra, M, R]):
    """Up to :data:`MAX_BATCH` requests; each item is checked in its own savepoint (a
    bad one is that item's 400, not the batch's)."""

    items: tuple[M, ...]
    item: ClassVar[type[Message]] = Message  # what every item must be

    def check(self) -> None:
        check_messages(self.items, self.item, "item")


async def ask_each(ref: Ref[A],
                   batch: Callable[[tuple[M, ...]], Ask[A, tuple[R | LeasegateError, ...]]],
                   items: Sequence[M | LeasegateError]) -> list[R | LeasegateError]:
    """Send the items not refused already (at the HTTP edge) as one batch message; the
    refused keep their error, in place. A refusal of the whole message (storage trouble,
    shutting down: nothing changed) is the whole call's."""
    taken = [item for item in items if not isinstance(item, LeasegateError)]
    replies = iter(await ref.ask(batch(tuple(taken))) if taken else ())
    return [item if isinstance(item, LeasegateError) else next(replies) for item in items]
