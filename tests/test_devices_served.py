"""Device presence in a served gateway (wall clock, short settings): the tracker's timer
runs in production, its effect seen through the public surface; the SDK's heartbeat
helpers; and a small flood of invented device ids that the table's capacity bounds."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from leasegate.client import AsyncClient, Client, Task
from tests.served import Served, serving

CAPACITY = 50
ENV = {"LEASEGATE_DEVICE_PAUSE_AFTER": "1", "LEASEGATE_DEVICE_CANCEL_AFTER": "4",
       "LEASEGATE_DEVICE_CAPACITY": str(CAPACITY), "LEASEGATE_HOUSEKEEPING_INTERVAL": "0.2"}
RSS_LIMIT_MIB = 300  # loose: a leak of the invented ids would not stay under it
FLOOD = Path(__file__).resolve().parent.parent / "bench" / "devices_flood.py"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path / "var", ENV) as served:
        yield served


def wait_for(check: Callable[[], Task], status: str, timeout: float = 8.0) -> Task:
    deadline = time.monotonic() + timeout
    while True:
        task = check()
        if task["status"] == status or time.monotonic() > deadline:
            assert task["status"] == status, task
            return task
        time.sleep(0.1)


def test_the_flood_bench_keeps_the_table_at_capacity() -> None:
    """The small version of ``bench/devices_flood.py``: 120 invented ids over 3 keys."""
    run = subprocess.run([sys.executable, str(FLOOD), "--count", "120", "--keys", "3",
                          "--capacity", str(CAPACITY), "--concurrency", "16"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "answers: {'200': 120}" in run.stdout, run.stdout
    after = re.search(r"after: devices table (\d+) rows .* server RSS ([\d.]+) MiB", run.stdout)
    assert after is not None, run.stdout
    assert int(after.group(1)) == CAPACITY
    assert float(after.group(2)) < RSS_LIMIT_MIB


def test_silent_devices_pause_then_cancel_their_tasks_and_heartbeats_resume_them(
        gateway: Served) -> None:
    client = Client(gateway.url, gateway.keys["client"])
    client.submit_task("shop", "download", {}, task_id="b1", device_id="d1", account="a1",
                       batch_total=10)
    client.submit_task("shop", "download", {}, task_id="b2", device_id="d2", account="a2",
                       batch_total=10)
    # Silent past device_pause_after (1 s): the served tracker pauses both.
    wait_for(lambda: client.get_task("b1"), "paused")
    wait_for(lambda: client.get_task("b2"), "paused")
    assert client.heartbeat_device("d1") == {"device_id": "d1", "state": "online",
                                             "resumed": 1}
    assert client.get_task("b1")["status"] == "queued"
    # d1 kept alive in the background; d2 stays silent past device_cancel_after (4 s).
    with client.keep_device_alive("d1", every=0.3):
        wait_for(lambda: client.get_task("b2"), "canceled")
        assert client.get_task("b1")["status"] == "queued"
    with gateway.client("admin") as admin:
        states = {d["device_id"]: d["state"] for d in admin.get("/v1/devices").json()["items"]}
        jobs = admin.get("/health").json()["details"]["jobs"]
    assert states["d1"] == "online" and states["d2"] == "gone"
    assert jobs["devices.device_presence"]["runs"] > 0

    async def keep_alive_async() -> None:
        async with (AsyncClient(gateway.url, gateway.keys["client"]) as aclient,
                    aclient.keep_device_alive("d3", every=0.3)):
            await trio.sleep(2.0)  # twice device_pause_after: only the beats keep it

    trio.run(keep_alive_async)
    with gateway.client("admin") as admin:
        d3 = [d for d in admin.get("/v1/devices").json()["items"] if d["device_id"] == "d3"]
    assert d3 and d3[0]["state"] == "online"
    client.close()
