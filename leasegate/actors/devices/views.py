"""Replies of the device tracker, built from its rows; rendered to JSON at the HTTP edge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.views import Instant
from leasegate.storage.engine import Row

DeviceState = Literal["online", "away", "gone"]


@dataclass(frozen=True)
class DeviceView:
    """A device as ``GET /v1/devices`` lists it; ``live_tasks`` are its unfinished tasks."""

    device_id: str
    tenant: str
    state: DeviceState
    last_seen_at: Instant
    live_tasks: int


@dataclass(frozen=True)
class Sighted:
    """The tracker's answer to a sighting: the device is online. ``came_back`` is set
    when it was away or gone: its paused tasks must be resumed (``version`` names that
    change, for :class:`~leasegate.actors.devices.sightings.ActionDone`). ``refused``:
    the table is full of devices with live tasks (the caller raises 6008)."""

    device_id: str
    state: DeviceState
    came_back: bool = False
    version: int = 0
    refused: bool = False


@dataclass(frozen=True)
class Heartbeat:
    """Reply of ``POST /v1/devices/{id}/heartbeat``: ``resumed`` counts the paused
    tasks put back in line."""

    device_id: str
    state: Literal["online"]
    resumed: int


@dataclass(frozen=True)
class DeviceCounts:
    """Devices by state, and the tracker's counters since start-up (for /metrics)."""

    by_state: dict[str, int]
    transitions: dict[str, int]
    evictions: int
    refusals: int


def device_view(row: Row, live_tasks: int) -> DeviceView:
    return DeviceView(row["device_id"], row["tenant"], row["state"], row["last_seen_at"],
                      live_tasks)
