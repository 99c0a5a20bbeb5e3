"""The device tracker's turn context and handler registry, and the outbox of the
actions its transitions owe the task actor."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Final

import trio

from leasegate.actors.devices.ref import Devices
from leasegate.actors.devices.views import DeviceState
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.turn import Turn
from leasegate.actors.tasks.device_actions import DeviceAction
from leasegate.settings import Settings

ACTIONS: Final[dict[str, DeviceAction]] = {"online": "resume", "away": "pause",
                                           "gone": "cancel"}

DeviceKey = tuple[str, str]  # (tenant, device_id)


@dataclass(frozen=True)
class PendingAction:
    tenant: str
    device_id: str
    state: DeviceState
    version: int

    @property
    def action(self) -> DeviceAction:
        return ACTIONS[self.state]


class Outbox:
    """Actions waiting for the task actor: one per device (a newer change replaces an
    older one), first in first out. Touched on the trio thread only; its size is
    bounded by the devices table's."""

    def __init__(self) -> None:
        self._items: dict[DeviceKey, PendingAction] = {}
        self._ready = trio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: PendingAction) -> None:
        key = (item.tenant, item.device_id)
        self._items.pop(key, None)
        self._items[key] = item
        self._ready.set()

    def drop(self, key: DeviceKey) -> None:
        self._items.pop(key, None)

    async def take(self) -> PendingAction:
        while not self._items:
            self._ready = trio.Event()
            await self._ready.wait()
        key = next(iter(self._items))
        return self._items.pop(key)


class DeviceTurn(Turn):
    """The runtime's turn, the tracker's settings, its outbox, and its counters since
    start-up (changed on the trio thread only, after each commit)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("devices")
        self.settings = settings
        self.outbox = Outbox()
        self.transitions: Counter[str] = Counter()
        self.evictions = 0
        self.refusals = 0


DEVICES = Handlers(Devices, DeviceTurn)
"""What the device tracker does with each message (filled in by ``sightings.py``)."""
