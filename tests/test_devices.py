"""End users' devices over HTTP: heartbeats, presence, what it does to their tasks.

Time is virtual (autojump): a device is away once silent for more than 90 s
(``device_pause_after``) and gone past 1800 s (``device_cancel_after``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.clock import Clock
from leasegate.settings import Settings
from tests.conftest import Gateway, start_gateway
from tests.test_http_tasks import BATCH, act, assert_error, call, fence, get, running, submit

pytestmark = pytest.mark.both_engines  # the behavioural suite: SQLite and PostgreSQL

Json = dict[str, Any]
PAUSE = 90.0


async def heartbeat(gw: Gateway, device_id: str, who: str = "t1") -> Json:
    status, body = await call(gw, "POST", f"/v1/devices/{device_id}/heartbeat", who)
    assert status == 200, body
    assert set(body) == {"device_id", "state", "resumed"}
    return body


async def devices(gw: Gateway, who: str = "admin") -> dict[tuple[str, str], Json]:
    status, body = await call(gw, "GET", "/v1/devices?limit=500", who)
    assert status == 200, body
    return {(d["tenant"], d["device_id"]): d for d in body["items"]}


async def metric(gw: Gateway, name: str) -> float:
    response = await gw.client.get("/metrics", headers=gw.auth("admin"))
    text = (await response.get_data()).decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


async def test_device_ids_are_scoped_by_tenant_and_each_client_sees_its_own(
        gateway: Gateway) -> None:
    assert await heartbeat(gateway, "d1") == {"device_id": "d1", "state": "online",
                                              "resumed": 0}
    await heartbeat(gateway, "d1", "t2")
    await submit(gateway, "t2", task_id="t2-task", device_id="d1")
    everyone = await devices(gateway)
    assert set(everyone) == {("t1", "d1"), ("t2", "d1")}
    assert everyone[("t2", "d1")]["live_tasks"] == 1
    assert everyone[("t1", "d1")]["live_tasks"] == 0
    assert everyone[("t1", "d1")]["state"] == "online"
    assert set(await devices(gateway, "t1")) == {("t1", "d1")}
    assert set(await devices(gateway, "t2")) == {("t2", "d1")}
    for who in ("admin", "worker"):  # a heartbeat belongs to a tenant
        status, body = await call(gateway, "POST", "/v1/devices/d1/heartbeat", who)
        assert_error(status, body, 403, 4030)


async def test_device_ids_over_64_characters_or_outside_the_alphabet_are_400(
        gateway: Gateway) -> None:
    for bad in ("d" * 65, "bad%20id", "caf%C3%A9", "a%0A"):
        status, body = await call(gateway, "POST", f"/v1/devices/{bad}/heartbeat", "t1")
        assert_error(status, body, 400, 4000)
    status, body = await call(gateway, "POST", "/v1/tasks", "t1",
                              {**BATCH, "device_id": "x" * 65})
    assert_error(status, body, 400, 4000)
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    status, body = await call(gateway, "POST", "/v1/tasks", "t1",
                              {**BATCH, "device_id": "d-deep", "params": {"x": deep}})
    assert_error(status, body, 400, 4000)  # a refused body sights no device
    assert await devices(gateway) == {}  # nothing was tracked, nothing truncated
    await heartbeat(gateway, "d" * 64)
    assert set(await devices(gateway)) == {("t1", "d" * 64)}


async def test_away_pauses_batch_tasks_and_back_resumes_them(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    item = await running(gateway, "run-1", **BATCH, device_id="d1")  # leased and started
    await submit(gateway, task_id="queued-batch", **{**BATCH, "account": "b2"}, device_id="d1")
    await submit(gateway, task_id="plain", device_id="d1")  # no batch_total: never paused
    await submit(gateway, task_id="other", **{**BATCH, "account": "b3"}, device_id="d2")
    await heartbeat(gateway, "d2")
    await trio.sleep(PAUSE + 1)
    states = {key[1]: d["state"] for key, d in (await devices(gateway)).items()}
    assert states == {"d1": "away", "d2": "away"}
    assert (await get(gateway, "queued-batch"))["status"] == "paused"
    assert (await get(gateway, "plain"))["status"] == "queued"
    assert (await get(gateway, "run-1"))["pause_requested"] is True
    status, renewed = await act(gateway, item, "renew", fence(item))
    assert status == 200 and renewed["pause_requested"] is True

    assert await heartbeat(gateway, "d1") == {"device_id": "d1", "state": "online",
                                              "resumed": 1}
    assert (await get(gateway, "queued-batch"))["status"] == "queued"
    assert (await get(gateway, "run-1"))["pause_requested"] is False
    assert (await get(gateway, "other"))["status"] == "paused"  # d2 is still away
    # A submit naming a device is a sighting too: d2 comes back, its task resumes.
    await submit(gateway, task_id="new", **{**BATCH, "account": "b4"}, device_id="d2")
    assert (await get(gateway, "other"))["status"] == "queued"
    status, history = await call(gateway, "GET", "/v1/tasks/queued-batch/events", "t1")
    assert status == 200
    assert [(e["kind"], e["detail"].get("by")) for e in history["items"]] == [
        ("submitted", None), ("paused", "device d1"), ("resumed", "device d1")]
    assert await metric(gateway, 'leasegate_device_transitions_total{kind="away"}') == 2
    assert await metric(gateway, 'leasegate_device_transitions_total{kind="back"}') == 2
    assert await metric(gateway, 'leasegate_devices{state="online"}') == 2


async def test_a_reader_waiting_on_a_task_hears_its_device_pause_it_at_once(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, task_id="waited-on", **BATCH, device_id="d1")
    start = trio.current_time()
    await trio.sleep(PAUSE - 10)
    status, task = await call(gateway, "GET", "/v1/tasks/waited-on?wait_seconds=30", "t1")
    # A pause settles a task for its readers: woken when the device went away
    # (just past device_pause_after), not at the end of the poll.
    assert status == 200 and task["status"] == "paused"
    assert PAUSE < trio.current_time() - start < PAUSE + 1


async def test_a_device_seen_exactly_at_its_pause_deadline_stays_online(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, task_id="b1", **BATCH, device_id="d1")  # seen now
    await trio.sleep(PAUSE)  # exactly device_pause_after: not silent for *more* than it
    assert await heartbeat(gateway, "d1") == {"device_id": "d1", "state": "online",
                                              "resumed": 0}
    assert (await get(gateway, "b1"))["status"] == "queued"
    assert (await get(gateway, "b1"))["updated_at"] == (await get(gateway, "b1"))["created_at"]
    await trio.sleep(PAUSE + 0.01)  # a hair past the new deadline: away
    assert (await get(gateway, "b1"))["status"] == "paused"
    assert await metric(gateway, 'leasegate_device_transitions_total{kind="away"}') == 1


async def test_gone_cancels_unfinished_tasks_and_settles_them_by_delivery(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    status, _ = await call(gateway, "POST", "/v1/ledger/accounts/t1/credit", "admin",
                           {"amount": 1000, "ref": "c1"})
    assert status == 200
    item = await running(gateway, "run-1", device_id="d1")  # not a batch task: never paused
    await submit(gateway, task_id="held", **BATCH, device_id="d1", max_cost=300)
    for _ in range(19):  # the worker keeps its lease while the device is silent
        await trio.sleep(100)
        status, _ = await act(gateway, item, "renew", fence(item))
        assert status == 200
    assert (await devices(gateway))[("t1", "d1")]["state"] == "gone"
    held = await get(gateway, "held")
    assert held["status"] == "canceled"
    assert held["billing"]["hold_status"] == "settled"
    assert held["billing"]["refunded"] == 300
    run = await get(gateway, "run-1")
    assert run["status"] == "running" and run["cancel_requested"] is True
    assert await metric(gateway, 'leasegate_device_transitions_total{kind="gone"}') == 1
    # Back from gone: online again; nothing is left to resume.
    assert (await heartbeat(gateway, "d1"))["resumed"] == 0


async def test_a_full_table_evicts_the_least_recently_seen_idle_device_else_refuses_6008(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    gw = await start_gateway(nursery, tmp_path / "lg.db", settings.replace(device_capacity=2),
                             clock)
    await heartbeat(gw, "a")
    await trio.sleep(1)
    await heartbeat(gw, "b")
    await trio.sleep(1)
    await heartbeat(gw, "a")  # now b is the least recently seen
    await trio.sleep(1)
    await heartbeat(gw, "c")
    assert set(await devices(gw)) == {("t1", "a"), ("t1", "c")}
    assert await metric(gw, "leasegate_device_evictions_total") == 1
    # Devices with live tasks are never evicted: a new one is refused.
    await submit(gw, task_id="ta", **BATCH, device_id="a")
    await submit(gw, task_id="tc", **{**BATCH, "account": "b2"}, device_id="c")
    status, body = await call(gw, "POST", "/v1/devices/d/heartbeat", "t2")
    assert_error(status, body, 429, 6008)
    status, body = await call(gw, "POST", "/v1/tasks", "t1",
                              {**BATCH, "account": "b3", "task_id": "td", "device_id": "d"})
    assert_error(status, body, 429, 6008)
    status, body = await call(gw, "GET", "/v1/tasks/td", "t1")
    assert_error(status, body, 404, 6001)  # refused before anything was enqueued
    # In a batch, the items naming the refused device are refused alone.
    status, body = await call(gw, "POST", "/v1/tasks/batch", "t1", {"items": [
        {**BATCH, "account": "b4", "task_id": "te", "device_id": "e"},
        {**BATCH, "account": "b5", "task_id": "tf", "device_id": "a"},
        {**BATCH, "account": "b6", "task_id": "tg", "device_id": "e"}]})
    assert status == 200
    assert [i["status"] for i in body["items"]] == [429, 201, 429]
    assert body["items"][0]["error"]["code"] == 6008
    status, body = await call(gw, "GET", "/v1/tasks/te", "t1")
    assert_error(status, body, 404, 6001)
    assert await metric(gw, "leasegate_device_refusals_total") == 3
    # A known device is always seen, full table or not.
    assert (await heartbeat(gw, "a"))["state"] == "online"
    # Once a's tasks are finished, a can go to make room.
    for task_id in ("ta", "tf"):
        status, _ = await call(gw, "POST", f"/v1/tasks/{task_id}/cancel", "t1")
        assert status == 200
    await heartbeat(gw, "d")
    assert set(await devices(gw)) == {("t1", "c"), ("t1", "d")}


async def test_an_away_action_lost_in_a_crash_is_sent_again_on_restart(
        tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    path = tmp_path / "lg.db"
    async with trio.open_nursery() as first:
        gw = await start_gateway(first, path, settings, clock)
        await submit(gw, task_id="b1", **BATCH, device_id="d1")
        # The crash: the tracker commits "away", but its message never reaches the
        # task actor (the process dies before the forwarder sends it).
        gw.system.device_actor.turn.outbox.put = lambda item: None  # type: ignore[method-assign]
        await trio.sleep(PAUSE + 1)
        assert (await devices(gw))[("t1", "d1")]["state"] == "away"
        assert (await get(gw, "b1"))["status"] == "queued"  # not paused: the message is lost
        gw.system.close()
    async with trio.open_nursery() as second:
        gw = await start_gateway(second, path, settings, clock)
        await trio.sleep(0.1)  # the restarted tracker sends the pending action at once
        assert (await get(gw, "b1"))["status"] == "paused"
        gw.system.close()
