"""The deliverer's wake-up: rung after each commit that wrote deliveries."""

from __future__ import annotations

import trio


class Bell:
    """A wake-up that is never missed: one rung while nobody waits is heard by the
    next :meth:`wait` (which returns at once and hears it only once)."""

    def __init__(self) -> None:
        self._rung = trio.Event()

    def ring(self) -> None:
        self._rung.set()

    async def wait(self) -> None:
        await self._rung.wait()
        self._rung = trio.Event()
