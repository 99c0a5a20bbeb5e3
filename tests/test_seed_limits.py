"""The seed's limits on work that waits: a paused task ends at its limit (task_ttl) with
its hold settled, and a device silent through a gateway restart goes straight to gone,
its work canceled."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from leasegate.client import Client
from tests.conftest import Gateway
from tests.served import Served, restart, serving, stop
from tests.test_http_tasks import BATCH, call, control, finish, get, running, submit

DEVICE_ENV = {"LEASEGATE_DEVICE_PAUSE_AFTER": "1", "LEASEGATE_DEVICE_CANCEL_AFTER": "3",
              "LEASEGATE_HOUSEKEEPING_INTERVAL": "0.2"}


async def test_a_paused_task_expires_after_task_ttl_and_its_hold_is_settled(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    status, _ = await call(gateway, "POST", "/v1/ledger/accounts/t1/credit", "admin",
                           {"amount": 100, "ref": "opening"})
    assert status == 200
    ttl = gateway.system.settings.task_ttl
    # Paused while queued (no work done), and paused by its worker after delivering 7.
    await submit(gateway, task_id="idle", max_cost=30, **{**BATCH, "account": "acct-i"})
    await control(gateway, "idle", "pause")
    item = await running(gateway, "half", max_cost=30, **BATCH)
    await control(gateway, "half", "pause")
    await finish(gateway, item, "paused", progress={"done": 7}, cost=7)
    await trio.sleep(ttl - 60)
    assert (await get(gateway, "idle"))["status"] == "paused"  # not yet
    await trio.sleep(61)
    for task_id, charged in (("idle", 0), ("half", 7)):
        task = await get(gateway, task_id)
        assert task["status"] == "expired", task
        assert "paused for task_ttl" in task["error"]["message"]
        assert task["billing"] == {"max_cost": 30, "charged": charged,
                                   "refunded": 30 - charged, "hold_status": "settled"}
    status, account = await call(gateway, "GET", "/v1/ledger/accounts/t1", "admin")
    assert account == {"account": "t1", "available": 93, "held": 0, "balance": 93}
    status, history = await call(gateway, "GET", "/v1/tasks/idle/events", "admin")
    assert status == 200 and "expired" in [e["kind"] for e in history["items"]]


@pytest.fixture
def devices_gateway(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path / "var", DEVICE_ENV) as served:
        yield served


def test_a_device_silent_through_a_restart_goes_straight_to_gone(
        devices_gateway: Served) -> None:
    served = devices_gateway
    client = Client(served.url, served.keys["client"])
    client.submit_task("shop", "download", {}, task_id="b1", device_id="d1", account="a1",
                       batch_total=10)
    client.heartbeat_device("d1")
    client.close()
    stop(served)  # the gateway is down while the device stays silent ...
    time.sleep(float(DEVICE_ENV["LEASEGATE_DEVICE_CANCEL_AFTER"]) + 0.5)  # ... past cancel
    served = restart(served)
    try:
        admin = served.client("admin")
        deadline = time.monotonic() + 8
        while True:
            task = admin.get("/v1/tasks/b1").json()
            devices = {d["device_id"]: d for d in admin.get("/v1/devices").json()["items"]}
            if task["status"] == "canceled" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert task["status"] == "canceled", task
        assert devices["d1"]["state"] == "gone"
        events = [e["kind"] for e in admin.get("/v1/tasks/b1/events").json()["items"]]
        assert "resumed" not in events and events[-1] in ("canceled", "settled"), events
    finally:
        stop(served)
