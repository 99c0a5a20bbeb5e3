"""The system's background jobs: periodic work that owns no tables (the rate-limit
sweep, the artifact sweeps), run by :func:`~leasegate.actors.runtime.periodic.run_guarded`.

A *shared* one works on what every gateway of the database shares (the artifact
directory): only the runs this gateway claims in the database (``periodic_sql``), so
that one gateway among them runs each due run; a run that fails is given back, due at
once, for any gateway. An unshared one works on this gateway's memory and runs here
every time.

An :class:`Outbox` holds what an actor's committed turns owe another actor, waiting
for the service that carries it there outside any turn (the device tracker's actions,
the schedules' claimed fires). One item per key: a newer one replaces an older one
still waiting, and goes last; first in, first out. Touched on the trio thread only
(turns fill it in their ``after_commit`` effects)::

    outbox = Outbox(lambda item: item.key)
    outbox.put(item)              # after a commit
    item = await outbox.take()    # the carrying service
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import trio

from leasegate.actors.runtime.periodic import JobRecord, run_guarded
from leasegate.clock import Clock
from leasegate.logs import Throttled
from leasegate.storage import periodic_sql
from leasegate.storage.connection import is_storage_failure
from leasegate.storage.database import Database
from leasegate.storage.engine import Connection


class BackgroundJob:
    def __init__(self, record: JobRecord, fn: Callable[[float], Awaitable[object]],
                 shared: bool) -> None:
        self.record = record
        self.fn = fn
        self.shared = shared

    def runner(self, clock: Clock, window: float,
               db: Database) -> Callable[[], Awaitable[None]]:
        """The job's loop, forever (``db``: where a shared job claims its runs)."""
        if not self.shared:
            return functools.partial(run_guarded, self.record, clock, window, self.fn)
        record = self.record
        gateway = record.gateway
        assert gateway is not None, "a shared job names its gateway"

        async def claim(now: float) -> bool | tuple[str, float] | None:
            def step(conn: Connection) -> bool | tuple[str, float] | None:
                if periodic_sql.claim(conn, record.key, gateway, now, record.every):
                    return True
                return periodic_sql.last_run(conn, record.key)

            return await db.run(step)

        async def give_back(now: float) -> None:
            await db.run(lambda conn: periodic_sql.due_again(conn, record.key, now))

        return functools.partial(run_guarded, record, clock, window, self.fn, claim=claim,
                                 give_back=give_back)


@contextmanager
def storage_failures_logged(log: Throttled, failing: str, recovered: str) -> Iterator[None]:
    """A background read or write that goes on after a storage failure: the failure is
    logged (``failing: <error>``, throttled) and swallowed, the first success after one
    says ``recovered``; any other error propagates."""
    try:
        yield
    except Exception as exc:
        if not is_storage_failure(exc):
            raise
        log.warning(trio.current_time(), f"{failing}: %s", exc)
    else:
        log.recovered(recovered)


K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class Outbox(Generic[K, T]):
    def __init__(self, key: Callable[[T], K]) -> None:
        self._key = key
        self._items: dict[K, T] = {}
        self._ready = trio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        key = self._key(item)
        self._items.pop(key, None)
        self._items[key] = item
        self._ready.set()

    def drop(self, key: K) -> None:
        self._items.pop(key, None)

    async def take(self) -> T:
        while not self._items:
            self._ready = trio.Event()
            await self._ready.wait()
        key = next(iter(self._items))
        return self._items.pop(key)
