"""Messages of the device tracker: sightings, the device list, confirmations.

Each request names its reply type and checks its own fields; device ids are
ids of the API alphabet (1-64 characters, never truncated), scoped by tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasegate.actors.checks import check_id, check_int, check_page
from leasegate.actors.device_views import DeviceCounts, DeviceView, Sighted
from leasegate.actors.mailbox import Ask
from leasegate.actors.pages import Page, Paged


@dataclass(frozen=True)
class SeeDevice(Ask[Sighted]):
    """A heartbeat, or a submit that names the device: it is online from now."""

    tenant: str
    device_id: str

    def check(self) -> None:
        check_id("tenant", self.tenant)
        check_id("device_id", self.device_id)


@dataclass(frozen=True)
class ActionDone(Ask[bool]):
    """The task actor applied the action of the device's change ``version``."""

    tenant: str
    device_id: str
    version: int

    def check(self) -> None:
        check_id("tenant", self.tenant)
        check_id("device_id", self.device_id)
        check_int("version", self.version, 0, 2**62)


@dataclass(frozen=True)
class ListDevices(Ask[Paged[DeviceView]]):
    tenant: str | None = None  # None: every tenant (admin)
    page: Page = Page()

    def check(self) -> None:
        check_id("tenant", self.tenant, optional=True)
        check_page(self.page)


@dataclass(frozen=True)
class CountDevices(Ask[DeviceCounts]):
    """Devices by state and the tracker's counters."""
