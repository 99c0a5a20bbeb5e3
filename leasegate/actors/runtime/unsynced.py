"""Turns committed but not durable yet (SQLite's commit pipeline), answered in order.

A turn's COMMIT returns before the WAL sync that makes it durable
(:mod:`leasegate.storage.wal_sync`): the actor keeps the turn here and applies the
next one meanwhile. A turn is answered (its effects run, its callers get their
replies) once its sync has returned and every earlier turn is answered, and only
between two turns: effects touch the turn context, which an apply reads on the
database thread. A sync returning while the actor is idle wakes it with a
:class:`Synced` message, which takes no turn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from leasegate.actors.runtime.applied import TurnBatch
from leasegate.actors.runtime.mailbox import Tell
from leasegate.storage.wal_sync import Synced


class SyncReturned(Tell[Any]):
    """Internal: a turn's sync returned while the actor was idle; no turn."""


class UnsyncedTurns:
    """One actor's committed turns waiting for their syncs, oldest first. ``answer``
    answers one turn; ``wake`` wakes the idle actor (both on the trio thread)."""

    def __init__(self, answer: Callable[[TurnBatch], None], wake: Callable[[], None]) -> None:
        self._turns: deque[tuple[Synced, TurnBatch]] = deque()
        self._answer = answer
        self._wake = wake
        self.applying = False  # a turn is on the database thread: no answers now

    def committed(self, synced: Synced, batch: TurnBatch) -> None:
        self._turns.append((synced, batch))
        if not synced.done:
            synced.on_done = self._returned

    def _returned(self) -> None:
        if not self.applying:  # during a turn: answered when it ends
            self._wake()

    def answer_durable(self) -> None:
        """Answer the turns whose commits are durable, oldest first; call between
        turns. A failed sync raises: nothing more may be acknowledged (see wal_sync)."""
        while self._turns and self._turns[0][0].done:
            synced, batch = self._turns.popleft()
            synced.check()
            self._answer(batch)

    async def answer_all(self) -> None:
        """Wait for every turn's sync and answer it (the actor's last turn is done)."""
        while self._turns:
            await self._turns[0][0].wait()
            self.answer_durable()
