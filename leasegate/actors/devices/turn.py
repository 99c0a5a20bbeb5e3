"""The device tracker's turn context and handler registry, and the outbox of the
actions its transitions owe the task actor."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Final

from leasegate.actors.devices import Devices
from leasegate.actors.devices.views import DeviceState
from leasegate.actors.runtime.background import Outbox
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


class DeviceTurn(Turn):
    """The runtime's turn, the tracker's settings, its outbox, and its counters since
    start-up (changed on the trio thread only, after each commit)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("devices")
        self.settings = settings
        self.outbox: Outbox[DeviceKey, PendingAction] = Outbox(
            lambda item: (item.tenant, item.device_id))
        self.transitions: Counter[str] = Counter()
        self.evictions = 0
        self.refusals = 0


DEVICES = Handlers(Devices, DeviceTurn)
"""What the device tracker does with each message (filled in by ``sightings.py``)."""
