"""Opening the device tracker and its forwarder."""

from __future__ import annotations

from leasegate.actors.devices import Devices, sightings, timer
from leasegate.actors.devices.forwarder import Forwarder
from leasegate.actors.devices.turn import DEVICES, DeviceTurn
from leasegate.actors.runtime.actor import Actor, Inbox
from leasegate.actors.tasks import TasksRef
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.database import Database

MODULES = (sightings, timer)
"""What the tracker does, module by module (importing one registers its handlers)."""


def open_devices(db: Database, clock: Clock, settings: Settings, *,
                 inbox: Inbox[Devices] | None = None,
                 tasks: TasksRef | None = None) -> tuple[Actor[Devices, DeviceTurn], Forwarder]:
    """The device tracker on ``db`` (not running yet), and the forwarder that carries
    its actions to ``tasks`` (run it with ``forward_next`` as a service)."""
    actor = Actor("devices", inbox or Inbox(Devices), db, clock, DeviceTurn(settings),
                  DEVICES, error_log_window=settings.error_log_window)
    actor.add_job("device_presence", settings.housekeeping_interval, timer.presence)
    return actor, Forwarder(actor.turn.outbox, devices=actor.ref, tasks=tasks)
