"""An actor's inbox: opened before the actor, so that others can hold its ref first.

The system opens every actor's inbox, hands the refs to whoever tells or asks
that actor, and only then constructs the actors (no wiring after construction)::

    tasks = Inbox(Tasks)
    ledger = open_ledger(Inbox(Ledger), ..., queues={"task": tasks.ref, ...})
    task_actor = open_tasks(tasks, ..., ledger=ledger.ref)
"""

from __future__ import annotations

from typing import Any, Final, Generic, TypeVar

import trio

from leasegate.actors.runtime.mailbox import Envelope, Ref
from leasegate.actors.runtime.waiters import Waiters

A = TypeVar("A")

MAILBOX_SIZE: Final = 4096


class Inbox(Generic[A]):
    """The bounded queue of envelopes of the actor tagged ``A``, its waiters,
    and the :class:`Ref` that reaches it."""

    def __init__(self, tag: type[A], size: int = MAILBOX_SIZE) -> None:
        self.tag = tag
        self.send, self.receive = trio.open_memory_channel[Envelope[Any]](size)
        self.waiters = Waiters()
        self.ref: Ref[A] = Ref(self.send, self.waiters.leave)
