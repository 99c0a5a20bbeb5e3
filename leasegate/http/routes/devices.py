"""Routes of end users' devices: heartbeats (client) and the device list.

Device ids are scoped by tenant: a client's heartbeat and list reach its own
tenant's devices only; an admin lists every tenant's.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint
from quart_schema import validate_querystring

from leasegate.actors.devices.forwarder import see_device
from leasegate.actors.devices.sightings import ListDevices
from leasegate.actors.devices.views import DeviceView, Heartbeat
from leasegate.actors.pages import Paged
from leasegate.http.models.jobs import ListArgs, page
from leasegate.http.models.replies import answers
from leasegate.http.server.auth import allow, require_tenant
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json

bp = Blueprint("devices", __name__)

DEVICE_ONLY = "heartbeats need a client key: devices belong to a tenant"


@bp.post("/v1/devices/<device_id>/heartbeat")
@allow("client", admin=False, refusal=DEVICE_ONLY)
@answers(Heartbeat, 429)
async def heartbeat(device_id: str) -> Any:
    """The device is there (client): online from now; if it was away or gone, its paused
    tasks resume (``resumed`` counts them). 6008 (429) when the device table is full of
    devices with unfinished tasks."""
    _, tenant = require_tenant("client")
    assert tenant is not None  # a client key (checked by allow)
    sys = system()
    return to_json(await see_device(sys.devices, sys.tasks, tenant, device_id))


@bp.get("/v1/devices")
@allow("client")
@validate_querystring(ListArgs)
@answers(Paged[DeviceView])
async def list_devices(query_args: ListArgs) -> Any:
    """Devices, most recently seen first: state, last seen, unfinished tasks (own
    tenant; admin: all)."""
    _, tenant = require_tenant("client")
    return to_json(await system().devices.ask(ListDevices(tenant, page(query_args))))
