"""How the async SDK waits and runs things at once: anyio, so trio or asyncio alike.

Written by hand, as is its twin ``_sync/backend.py``, which gives the same names
with threads: every other module of this package is the one source of both SDKs
(``scripts/sync_sdk.py`` writes ``_sync/`` from it), and each side's modules import
their own backend. What the names are here:

- ``sleep``, ``current_time``: anyio's (a sleep ends early when its scope is
  cancelled);
- ``open_task_group``, ``TaskGroup``, ``CancelScope``: anyio's;
- ``run_each``: a function run for several items at once, in tasks;
- ``Wakeup``: a condition variable; its ``with`` costs nothing (one thread);
- ``Stopper``: a stop request, which cancels the waits it was asked to end;
- ``check_unbatched_max``: the ``max`` a worker takes without ``batch``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc

from leasegate.client._protocol import Stopped

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]
sleep = anyio.sleep
current_time = anyio.current_time
TaskGroup = anyio.abc.TaskGroup
open_task_group = anyio.create_task_group
CancelScope = anyio.CancelScope


def check_unbatched_max(max: int) -> None:
    """Any ``max``: the jobs of a lease call run at once, each in a task (the gateway
    bounds ``max``)."""


async def run_each(group: TaskGroup, run: Callable[[T], Coroutine[Any, Any, None]],
                   items: Sequence[T]) -> None:
    """``run(item)`` for every item at once: the last in this task, each other in a task
    of ``group`` (whose end waits for them)."""
    for item in items[:-1]:
        group.start_soon(run, item)
    if items:
        await run(items[-1])


class Wakeup:
    """A condition variable for tasks: what its waiters read is changed inside ``with
    wakeup:`` (here that takes no lock: every task runs in one thread), and each change
    is followed by :meth:`notify`. A notify given while nobody waits is kept for the
    next wait."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def notify(self) -> None:
        self._event.set()

    async def wait_until(self, deadline: float) -> None:
        """Wait for a :meth:`notify` until ``deadline`` (``current_time()``; ``math.inf``:
        no deadline). Cancellable."""
        with anyio.CancelScope(deadline=deadline):
            await self._event.wait()
        if self._event.is_set():
            self._event = anyio.Event()


class Stopper:
    """A stop request for a loop, and the waits it ends: :meth:`stop` cancels every
    wait inside :meth:`interruptible` (at once if already stopped). Call it from the
    event loop's thread."""

    def __init__(self) -> None:
        self.stopped = False
        self._waiting: set[anyio.CancelScope] = set()

    def stop(self) -> None:
        self.stopped = True
        for scope in self._waiting:
            scope.cancel()

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A block that :meth:`stop` abandons (it then ends without an error)."""
        with anyio.CancelScope() as scope:
            if self.stopped:
                scope.cancel()
            self._waiting.add(scope)
            try:
                yield
            finally:
                self._waiting.discard(scope)

    async def wait(self, seconds: float) -> bool:
        """Sleep ``seconds``, less if stopped; whether it is stopped."""
        with self.interruptible():
            await anyio.sleep(seconds)
        return self.stopped

    async def sleep(self, seconds: float) -> None:
        """A retry pause: raises :class:`Stopped` if stopped before or while it lasts."""
        if await self.wait(seconds):
            raise Stopped

