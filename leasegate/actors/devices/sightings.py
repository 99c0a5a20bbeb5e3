"""Messages of the device tracker, each followed by its handler: sightings, the
device list, confirmations.

Device ids are ids of the API alphabet (1-64 characters, never truncated), scoped
by tenant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TypeVar

from leasegate.actors.checks import check_id, check_int
from leasegate.actors.devices import Devices
from leasegate.actors.devices.turn import DEVICES, DeviceKey, DeviceTurn
from leasegate.actors.devices.views import DeviceCounts, DeviceView, Sighted, device_view
from leasegate.actors.pages import Page, Paged, check_page, paged
from leasegate.actors.runtime.mailbox import Ask
from leasegate.logs import escape
from leasegate.storage import devices_sql as sql
from leasegate.storage.turn_locks import lock_scopes

log = logging.getLogger("leasegate.devices")

R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class OfDevice(Ask[Devices, R_co]):
    """A message about one device (its reply an ``R_co``): the tenant's device id."""

    tenant: str
    device_id: str

    def check(self) -> None:
        check_id("tenant", self.tenant)
        check_id("device_id", self.device_id)


@dataclass(frozen=True)
class SeeDevice(OfDevice[Sighted]):
    """A heartbeat, or a submit that names the device: it is online from now."""


@DEVICES.on(SeeDevice)
def see(turn: DeviceTurn, m: SeeDevice) -> Sighted:
    conn, now = turn.conn, turn.now
    tenant, device_id = m.tenant, m.device_id
    key = (tenant, device_id)
    row = sql.get_to_change(conn, tenant, device_id)
    if row is None:
        # A new device: across gateways, the count and the eviction that keep the table
        # within its capacity are one; the device may have come in meanwhile.
        lock_scopes(conn, ["devices capacity"])
        row = sql.get_to_change(conn, tenant, device_id)
    if row is None:
        if sql.count(conn) >= turn.settings.device_capacity:
            evicted = sql.evict_one(conn)
            if evicted is None:
                turn.after_commit(lambda: _refused(turn))
                return Sighted(device_id, "online", refused=True)
            gone_key = (evicted["tenant"], evicted["device_id"])
            turn.after_commit(lambda: _evicted(turn, gone_key))
        sql.insert(conn, tenant, device_id, now)
        return Sighted(device_id, "online")
    if row["state"] == "online":
        sql.seen(conn, tenant, device_id, now)
        return Sighted(device_id, "online")
    version = sql.change(conn, tenant, device_id, row["state"], "online", now, seen_at=now)
    assert version is not None  # this turn read the row locked: nobody else writes it
    log.info("device back (was %s): %s/%s", row["state"], escape(tenant), escape(device_id))
    # The caller resumes its tasks itself; an older action still waiting is moot.
    turn.after_commit(lambda: _came_back(turn, key))
    return Sighted(device_id, "online", came_back=True, version=version)


def _refused(turn: DeviceTurn) -> None:
    turn.refusals += 1


def _evicted(turn: DeviceTurn, key: DeviceKey) -> None:
    turn.evictions += 1
    turn.outbox.drop(key)


def _came_back(turn: DeviceTurn, key: DeviceKey) -> None:
    turn.transitions["back"] += 1
    turn.outbox.drop(key)


@dataclass(frozen=True)
class ActionDone(OfDevice[bool]):
    """The task actor applied the action of the device's change ``version``."""

    version: int

    def check(self) -> None:
        super().check()
        check_int("version", self.version, 0, 2**62)


@DEVICES.on(ActionDone)
def action_done(turn: DeviceTurn, m: ActionDone) -> bool:
    return sql.acted(turn.conn, m.tenant, m.device_id, m.version)


@dataclass(frozen=True)
class ListDevices(Ask[Devices, Paged[DeviceView]]):
    tenant: str | None = None  # None: every tenant (admin)
    page: Page = Page()

    def check(self) -> None:
        check_id("tenant", self.tenant, optional=True)
        check_page(self.page)


@DEVICES.on(ListDevices)
def list_devices(turn: DeviceTurn, m: ListDevices) -> Paged[DeviceView]:
    return paged(sql.page(turn.conn, m.tenant, m.page.limit, m.page.offset),
                 lambda row: device_view(row, row["live_tasks"]), m.page)


@dataclass(frozen=True)
class CountDevices(Ask[Devices, DeviceCounts]):
    """Devices by state and the tracker's counters."""


@DEVICES.on(CountDevices)
def count(turn: DeviceTurn, m: CountDevices) -> DeviceCounts:
    return DeviceCounts(sql.by_state(turn.conn), dict(turn.transitions), turn.evictions,
                        turn.refusals)
