"""How the blocking SDK waits and runs things at once: threads.

Written by hand, the twin of ``_async/backend.py`` (which says what each name is
for): the modules beside it are generated from ``_async/`` by
``scripts/sync_sdk.py`` and import this module where theirs import that one. Where
the two differ, it is because a thread cannot be cancelled:

- a ``CancelScope`` here only notes ``cancel()``: the blocking call inside runs
  to its end (within its timeout), and what it brings back is ignored;
- a ``TaskGroup`` whose block raises (Ctrl-C) does not wait for its threads
  (daemons, abandoned as the async group would cancel its tasks); one that ends
  well waits for them all, and raises the first error one of them raised;
  ``run_each`` does the same with its handlers' threads, before it returns;
- ``Stopper.interruptible`` cannot abandon a call: a stopped worker ends its
  long-poll first, and only its retry pauses and idle pause end early.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Final, Self, TypeVar

from leasegate.client._protocol import Stopped

log = logging.getLogger("leasegate.client")

T = TypeVar("T")

Sleep = Callable[[float], None]
sleep = time.sleep
current_time = time.monotonic


def check_unbatched_max(max: int) -> None:
    """Without ``batch`` the blocking worker takes one job a lease call: its handler runs
    alone, in the calling thread."""
    if max != 1:
        raise ValueError(
            f"Worker leases one job a call unless batch=N is given, so max must be 1, not "
            f"{max!r}: its handler runs alone, in the calling thread. Use batch=N (handlers "
            "in threads) or AsyncWorker to run several jobs of one lease call concurrently."
        )


class TaskGroup:
    """Functions run each in a thread of its own, waited for together (see the module's
    docstring)."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            return
        joined = 0
        while joined < len(self._threads):  # a thread may start another meanwhile
            self._threads[joined].join()
            joined += 1
        if self._errors:
            raise self._errors[0]

    def start_soon(self, run: Callable[..., object], *args: Any, name: str | None = None) -> None:
        thread = threading.Thread(target=_run, args=(run, args, self._errors), daemon=True,
                                  name=f"leasegate {name or getattr(run, '__name__', '')}")
        self._threads.append(thread)
        thread.start()


def open_task_group() -> TaskGroup:
    return TaskGroup()


def run_each(group: TaskGroup, run: Callable[[T], None], items: Sequence[T]) -> None:
    """``run(item)`` for every item at once, and return when all have: the last in this
    thread, the others in threads that a quick one frees for the next (``group`` waits
    for nothing more)."""
    if len(items) > 1:
        with _Pool() as pool:
            for item in items[:-1]:
                pool.start(run, item)
            run(items[-1])
    elif items:
        run(items[0])


def _run(run: Callable[..., object], args: tuple[Any, ...], errors: list[BaseException]) -> None:
    try:
        run(*args)
    except BaseException as error:
        log.exception("leasegate: %r failed in a thread", run)
        errors.append(error)


class _Pool(TaskGroup):
    """Threads for the handlers of a lease call: each starts at once, in a thread that
    is free if one is, else in a new one (a daemon), so that quick handlers share a
    few threads and slow ones get a thread each. Left as a group is."""

    def __init__(self) -> None:
        super().__init__()
        self._work: queue.SimpleQueue[tuple[Callable[[Any], None], Any] | None] = (
            queue.SimpleQueue())
        self._free = threading.Semaphore(0)  # threads waiting for work

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for _ in self._threads:
            self._work.put(None)  # after all the work: each thread's last
        super().__exit__(exc_type, exc, tb)

    def start(self, run: Callable[[T], None], item: T) -> None:
        self._work.put((run, item))
        if not self._free.acquire(blocking=False):
            thread = threading.Thread(target=self._serve, daemon=True, name="leasegate handler")
            self._threads.append(thread)
            thread.start()

    def _serve(self) -> None:
        while (work := self._work.get()) is not None:
            run, item = work
            _run(run, (item,), self._errors)
            self._free.release()


class CancelScope:
    """anyio's cancel scope as far as a thread can have one: ``cancel()`` is noted
    (``cancel_called``), and nothing is interrupted."""

    def __init__(self) -> None:
        self.cancel_called = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def cancel(self) -> None:
        self.cancel_called = True


class Wakeup:
    """A condition variable for threads: what its waiters read is changed inside ``with
    wakeup:`` (a lock), each change followed by :meth:`notify`. The condition itself is
    made by the first wait (most wake-ups of a worker, a query's, are never waited for)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._condition: threading.Condition | None = None  # made and read under the lock

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._lock.release()

    def notify(self) -> None:
        """Wake the waiters (inside ``with``)."""
        if self._condition is not None:
            self._condition.notify_all()

    def wait_until(self, deadline: float) -> None:
        """Wait (inside ``with``, which it leaves meanwhile) for a :meth:`notify` until
        ``deadline`` (``current_time()``; ``math.inf``: no deadline)."""
        if self._condition is None:
            self._condition = threading.Condition(self._lock)
        if deadline == math.inf:
            self._condition.wait()
        else:
            self._condition.wait(max(0.0, deadline - time.monotonic()))


class Stopper:
    """A stop request for a loop, and the waits it ends. :meth:`stop` may be called from
    any thread or a signal handler."""

    def __init__(self) -> None:
        self._event = threading.Event()

    @property
    def stopped(self) -> bool:
        return self._event.is_set()

    def stop(self) -> None:
        self._event.set()

    def interruptible(self) -> _RunsToItsEnd:
        """A block that :meth:`stop` would abandon, if a thread could be: it runs to its end."""
        return _RUNS_TO_ITS_END

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds``, less if stopped; whether it is stopped."""
        return self._event.wait(seconds)

    def sleep(self, seconds: float) -> None:
        """A retry pause: raises :class:`Stopped` if stopped before or while it lasts."""
        if self.wait(seconds):
            raise Stopped


class _RunsToItsEnd:
    """``Stopper.interruptible()`` here: a ``with`` that changes nothing."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


_RUNS_TO_ITS_END: Final = _RunsToItsEnd()
