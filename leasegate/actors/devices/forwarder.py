"""What carries the tracker's actions to the task actor, outside any turn: the
forwarder (a service of the system) and a caller's sighting (:func:`see_device`)."""

from __future__ import annotations

import logging
import math
from typing import Final

import trio

from leasegate.actors.devices import DevicesRef
from leasegate.actors.devices.sightings import ActionDone, SeeDevice
from leasegate.actors.devices.turn import DeviceKey, PendingAction
from leasegate.actors.devices.views import Heartbeat
from leasegate.actors.runtime.background import Outbox
from leasegate.actors.runtime.periodic import JobRecord
from leasegate.actors.tasks import TasksRef
from leasegate.actors.tasks.device_actions import ApplyDeviceAction
from leasegate.errors import DeviceLimit, LeasegateError
from leasegate.logs import escape

log = logging.getLogger("leasegate.devices")

RESUME_SECONDS: Final = 10.0
"""How long a caller that saw a device come back spends resuming its tasks."""


class Forwarder:
    """Delivers the outbox's actions to the task actor in order, then records each
    done (a crash in between: the tracker sends it again, see the package docstring)."""

    def __init__(self, outbox: Outbox[DeviceKey, PendingAction], *, devices: DevicesRef,
                 tasks: TasksRef | None) -> None:
        self.outbox = outbox
        self.devices = devices
        self.tasks = tasks
        self.record = JobRecord("forward_device_actions", owner="devices", every=math.inf)

    async def forward_next(self) -> bool:
        """Deliver the next waiting action to the task actor, then record it done."""
        item = await self.outbox.take()
        if self.tasks is not None:
            await self.tasks.ask(ApplyDeviceAction(item.tenant, item.device_id, item.action))
        await self.devices.ask(ActionDone(item.tenant, item.device_id, item.version))
        return True


async def see_device(devices: DevicesRef, tasks: TasksRef, tenant: str,
                     device_id: str) -> Heartbeat:
    """A sighting (a heartbeat, or a submit naming the device): online from now; if it
    was away or gone, its paused tasks resume before this returns. 6008 when the table
    is full of devices with live tasks."""
    sighted = await devices.ask(SeeDevice(tenant, device_id))
    if sighted.refused:
        raise DeviceLimit(f"the device table is full: every device in it has unfinished "
                          f"tasks; device {device_id} is not tracked (retry once tasks "
                          "finish)")
    resumed = 0
    if sighted.came_back:
        # Shielded: a caller that leaves now must not leave the tasks paused (the
        # presence job would resume them, but later).
        with trio.move_on_after(RESUME_SECONDS, shield=True):
            try:
                resumed = await tasks.ask(ApplyDeviceAction(tenant, device_id, "resume"))
                await devices.ask(ActionDone(tenant, device_id, sighted.version))
            except LeasegateError as exc:
                log.warning("device %s/%s back, its tasks not resumed yet (the presence "
                            "job will): %s", escape(tenant), escape(device_id), exc)
    return Heartbeat(device_id, "online", resumed)
