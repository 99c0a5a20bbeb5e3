"""An outbox: what an actor's committed turns owe another actor, waiting for the
service that carries it there outside any turn (the device tracker's actions, the
schedules' claimed fires). One item per key: a newer one replaces an older one still
waiting, and goes last; first in, first out. Touched on the trio thread only (turns
fill it in their ``after_commit`` effects)::

    outbox = Outbox(lambda item: item.key)
    outbox.put(item)              # after a commit
    item = await outbox.take()    # the carrying service
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import trio

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
