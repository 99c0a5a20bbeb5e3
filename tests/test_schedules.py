"""Recurring schedules through HTTP, on both engines, on the autojump clock: each fire
at its cron time exactly (wall time starts at 2026-11-30T08:00:00Z), as the job
``<schedule_id>@<fire time>``; what a downtime leaves to catch up; overlap; the
daylight-saving rule; refusals recorded on the fire; the bound per tenant; tenants
apart."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.clock import Clock
from leasegate.settings import Settings
from tests.conftest import Gateway, start_gateway

pytestmark = pytest.mark.both_engines

Json = dict[str, Any]
TASK = {"site": "shop", "kind": "report", "params": {"n": 1}}


async def put(gw: Gateway, schedule_id: str, who: str = "t1", *, status: int = 201,
              **fields: Any) -> Json:
    body = {"cron": "*/10 * * * *", "channel": "task", "template": TASK, **fields}
    got, reply = await gw.call("PUT", f"/v1/schedules/{schedule_id}", who, json=body)
    assert got == status, reply
    result: Json = reply
    return result


async def show(gw: Gateway, schedule_id: str, who: str = "t1") -> Json:
    status, reply = await gw.call("GET", f"/v1/schedules/{schedule_id}", who)
    assert status == 200, reply
    result: Json = reply
    return result


def fires(schedule: Json) -> list[tuple[str, str, str]]:
    """The schedule's fires, oldest first: (fire time, job id, status)."""
    return [(f["fire_at"], f["job_id"], f["status"]) for f in reversed(schedule["fires"])]


async def task_ids(gw: Gateway, prefix: str) -> list[str]:
    status, page = await gw.call("GET", "/v1/tasks?limit=500", "t1")
    assert status == 200, page
    return sorted(t["task_id"] for t in page["items"] if t["task_id"].startswith(prefix))


@contextlib.asynccontextmanager
async def running(tmp_path: Path, settings: Settings, clock: Clock) -> AsyncIterator[Gateway]:
    """A gateway for the body of the ``async with``; then it stops (a downtime follows
    until the next one starts on the same database)."""
    async with trio.open_nursery() as nursery:
        gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)
        yield gw
        gw.system.close()


async def test_a_schedule_fires_its_job_at_each_cron_time_exactly(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    created = await put(gateway, "tenly")
    assert {k: created[k] for k in ("schedule_id", "tenant", "cron", "timezone", "channel",
                                    "template", "overlap", "catch_up", "paused",
                                    "next_fire_at", "fires", "created_at")} == {
        "schedule_id": "tenly", "tenant": "t1", "cron": "*/10 * * * *", "timezone": "UTC",
        "channel": "task", "template": TASK, "overlap": "skip",
        "catch_up": "latest", "paused": False, "next_fire_at": "2026-11-30T08:10:00Z",
        "fires": [], "created_at": "2026-11-30T08:00:00Z"}
    await trio.sleep(600 - 0.001)
    assert await task_ids(gateway, "tenly@") == []
    await trio.sleep(0.002)
    status, task = await gateway.call("GET", "/v1/tasks/tenly@2026-11-30T08:10:00Z", "t1")
    assert status == 200, task
    assert (task["status"], task["site"], task["kind"], task["params"], task["created_at"]) == (
        "queued", "shop", "report", {"n": 1}, "2026-11-30T08:10:00Z")
    schedule = await show(gateway, "tenly")
    assert schedule["fires"] == [{"fire_at": "2026-11-30T08:10:00Z", "error": None,
                                  "job_id": "tenly@2026-11-30T08:10:00Z",
                                  "status": "submitted"}]
    assert schedule["next_fire_at"] == "2026-11-30T08:20:00Z"
    # Replaced: 200, the new cron from now on; the fires so far are kept.
    replaced = await put(gateway, "tenly", status=200, cron="5 * * * *", overlap="allow")
    assert (replaced["next_fire_at"], replaced["overlap"], len(replaced["fires"])) == (
        "2026-11-30T09:05:00Z", "allow", 1)
    await trio.sleep(3600)
    assert await task_ids(gateway, "tenly@") == ["tenly@2026-11-30T08:10:00Z",
                                                 "tenly@2026-11-30T09:05:00Z"]


async def test_a_query_schedule_fires_queries(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await put(gateway, "balance", cron="0 9 * * *", channel="query",
              template={"site": "bank", "kind": "balance", "params": {}})
    await trio.sleep(3600)
    status, query = await gateway.call("GET", "/v1/queries/balance@2026-11-30T09:00:00Z", "t1")
    assert (status, query["status"], query["created_at"]) == (200, "queued",
                                                              "2026-11-30T09:00:00Z"), query


async def test_fires_missed_while_no_gateway_ran_are_caught_up_as_each_schedule_says(
        tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    async with running(tmp_path, settings, clock) as gw:
        for mode in ("latest", "none", "all"):
            await put(gw, f"hourly-{mode}", cron="0 * * * *", catch_up=mode, overlap="allow")
        await put(gw, "minutely", cron="* * * * *", catch_up="all", overlap="allow")
    await trio.sleep(5.5 * 3600)  # down from 08:00 to 13:30
    async with running(tmp_path, settings, clock) as gw:
        await trio.sleep(1)
        latest, none, every = [await show(gw, f"hourly-{mode}")
                               for mode in ("latest", "none", "all")]
        assert fires(latest) == [("2026-11-30T13:00:00Z", "hourly-latest@2026-11-30T13:00:00Z",
                                  "submitted")]
        assert fires(none) == []
        assert [f[0][11:16] for f in fires(every)] == ["09:00", "10:00", "11:00", "12:00",
                                                        "13:00"]
        assert {f[2] for f in fires(every)} == {"submitted"}
        for schedule in (latest, none, every):
            assert schedule["next_fire_at"] == "2026-11-30T14:00:00Z"
        # Every minute for five and a half hours: the last 100 (12:00 to 13:30), each a
        # job; the schedule shows its last 20.
        made = await task_ids(gw, "minutely@")
        assert (len(made), made[0], made[-1]) == (100, "minutely@2026-11-30T11:51:00Z",
                                                  "minutely@2026-11-30T13:30:00Z")
        assert len((await show(gw, "minutely"))["fires"]) == 20
        await trio.sleep(30 * 60)  # on time again: one fire each
        assert len(fires(await show(gw, "hourly-none"))) == 1


async def test_overlap_skip_waits_for_the_previous_job_and_allow_does_not(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await put(gateway, "skipper")
    await put(gateway, "piler", overlap="allow", template={**TASK, "account": "other"})
    await trio.sleep(20 * 60 + 1)  # 08:10 and 08:20
    assert [f[2] for f in fires(await show(gateway, "skipper"))] == ["submitted", "skipped"]
    assert [f[2] for f in fires(await show(gateway, "piler"))] == ["submitted", "submitted"]
    status, _ = await gateway.call("POST", "/v1/tasks/skipper@2026-11-30T08:10:00Z/cancel",
                                   "t1")
    assert status == 200
    await trio.sleep(10 * 60)  # 08:30: the previous job (08:10's) is finished
    assert fires(await show(gateway, "skipper")) == [
        ("2026-11-30T08:10:00Z", "skipper@2026-11-30T08:10:00Z", "submitted"),
        ("2026-11-30T08:20:00Z", "skipper@2026-11-30T08:20:00Z", "skipped"),
        ("2026-11-30T08:30:00Z", "skipper@2026-11-30T08:30:00Z", "submitted")]
    assert await task_ids(gateway, "skipper@") == ["skipper@2026-11-30T08:10:00Z",
                                                   "skipper@2026-11-30T08:30:00Z"]
    assert len(await task_ids(gateway, "piler@")) == 3


@pytest.mark.parametrize(("start", "cron", "fired", "then"), [
    # Spring forward (2027-03-14, 02:00 EST -> 03:00 EDT): 02:30 never comes; the fire is
    # at the first minute after the gap (03:00 EDT), then 02:30 EDT the next day.
    ("2027-03-14T06:00:00Z", "30 2 * * *", "2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"),
    # Fall back (2027-11-07, 02:00 EDT -> 01:00 EST): 01:30 comes twice; it fires once,
    # the first time (EDT, 05:30Z), not at 01:30 EST (06:30Z), then 01:30 EST next day.
    ("2027-11-07T05:00:00Z", "30 1 * * *", "2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"),
])
async def test_daylight_saving_gaps_and_repeats_follow_the_cron_rule(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, start: str, cron: str,
        fired: str, then: str, autojump_clock: trio.testing.MockClock) -> None:
    clock = Clock(datetime.fromisoformat(start).timestamp())
    gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)
    created = await put(gw, "dst", cron=cron, timezone="America/New_York", overlap="allow")
    assert created["next_fire_at"] == fired
    await trio.sleep(2 * 3600)  # past the hour the clock repeats, too
    schedule = await show(gw, "dst")
    assert fires(schedule) == [(fired, f"dst@{fired}", "submitted")]
    assert schedule["next_fire_at"] == then


async def test_a_fire_short_of_funds_is_recorded_with_its_402_and_not_retried(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await put(gateway, "billed", template={**TASK, "max_cost": 50})
    await trio.sleep(10 * 60 + 1)
    schedule = await show(gateway, "billed")
    assert schedule["fires"] == [{
        "fire_at": "2026-11-30T08:10:00Z", "job_id": "billed@2026-11-30T08:10:00Z",
        "status": "failed", "error": {"code": 6007, "type": "insufficient_funds",
                                      "message": schedule["fires"][0]["error"]["message"]}}]
    status, _ = await gateway.call("GET", "/v1/tasks/billed@2026-11-30T08:10:00Z", "t1")
    assert status == 404
    status, _ = await gateway.call("POST", "/v1/ledger/accounts/t1/credit", "admin",
                                   json={"amount": 50, "ref": "topup"})
    assert status == 200
    await trio.sleep(10 * 60)  # the next fire is billed like any submit
    assert [f[2] for f in fires(await show(gateway, "billed"))] == ["failed", "submitted"]
    status, account = await gateway.call("GET", "/v1/ledger/accounts/t1", "t1")
    assert (account["available"], account["held"]) == (0, 50)


async def test_a_tenant_has_at_most_max_schedules_per_tenant(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    gw = await start_gateway(nursery, tmp_path / "leasegate.db",
                             settings.replace(max_schedules_per_tenant=2), clock)
    await put(gw, "one")
    await put(gw, "two")
    refused = await put(gw, "three", status=409)
    assert refused["error"]["type"] == "state_conflict"
    assert "max_schedules_per_tenant" in refused["error"]["message"]
    await put(gw, "two", status=200, cron="0 * * * *")  # a replace is no new one
    await put(gw, "three", "t2")  # another tenant's count
    status, _ = await gw.call("DELETE", "/v1/schedules/one", "t1")
    assert status == 204
    await put(gw, "three-again")


async def test_another_tenants_schedule_is_404_and_its_id_taken(gateway: Gateway) -> None:
    await put(gateway, "mine")
    for method, path in (("GET", ""), ("DELETE", ""), ("POST", "/pause"),
                         ("POST", "/resume"), ("POST", "/trigger")):
        status, reply = await gateway.call(method, f"/v1/schedules/mine{path}", "t2")
        assert (status, reply["error"]["type"]) == (404, "not_found"), (method, path)
    status, page = await gateway.call("GET", "/v1/schedules", "t2")
    assert (status, page["items"], page["total"]) == (200, [], 0)
    taken = await put(gateway, "mine", "t2", status=409)
    assert taken["error"]["code"] == 6003
    assert (await show(gateway, "mine"))["tenant"] == "t1"  # unchanged
    # An admin names the tenant it creates one for, and sees every tenant's.
    missing = await put(gateway, "ops", "admin", status=403)  # as an admin submit
    assert "tenant" in missing["error"]["message"]
    assert (await put(gateway, "ops", "admin", tenant="t2"))["tenant"] == "t2"
    assert (await show(gateway, "ops", "t2"))["schedule_id"] == "ops"
    status, page = await gateway.call("GET", "/v1/schedules", "admin")
    assert sorted(s["schedule_id"] for s in page["items"]) == ["mine", "ops"]
    status, page = await gateway.call("GET", "/v1/schedules?tenant=t2", "admin")
    assert [s["schedule_id"] for s in page["items"]] == ["ops"]
    await put(gateway, "other", "t1", status=403, tenant="t2")


@pytest.mark.parametrize(("fields", "names"), [
    ({"cron": "* * * *"}, "five cron fields"),
    ({"cron": "0 0 * * * *"}, "five cron fields"),
    ({"cron": "0 0 L * *"}, "five cron fields"),
    ({"cron": "61 * * * *"}, "five cron fields"),
    ({"cron": "0 24 * * *"}, "five cron fields"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"timezone": "../etc/passwd"}, "timezone"),
    ({"channel": "email"}, "channel"),
    ({"overlap": "queue"}, "overlap"),
    ({"catch_up": "some"}, "catch_up"),
    ({"template": {"kind": "report"}}, "template.site"),
    ({"template": {**TASK, "color": "red"}}, "template.color"),
    ({"template": {**TASK, "task_id": "t9"}}, "task_id"),
    ({"template": {**TASK, "not_before": "2026-12-01T00:00:00Z"}}, "not_before"),
    ({"template": {**TASK, "priority": 10}}, "template.priority"),
    ({"channel": "query", "template": {**TASK, "priority": 1}}, "template.priority"),
])
async def test_a_bad_schedule_is_400_and_nothing_is_made(
        gateway: Gateway, fields: Json, names: str) -> None:
    refused = await put(gateway, "bad", status=400, **fields)
    assert refused["error"]["code"] == 4000
    assert names in refused["error"]["message"], refused
    status, _ = await gateway.call("GET", "/v1/schedules/bad", "t1")
    assert status == 404


@pytest.mark.parametrize(("cron", "next_fire_at"), [
    ("0 22-2 * * *", "2026-11-30T22:00:00Z"),  # 22, 23, 0, 1, 2
    ("0 9 * * FRI-MON", "2026-11-30T09:00:00Z"),  # a Monday: Fri, Sat, Sun, Mon
    ("0 9 * * 7-2", "2026-11-30T09:00:00Z"),  # Sunday (7 or 0) to Tuesday
    ("0 0 30 2 *", None),  # no February has a 30th: it never fires
])
async def test_a_range_past_its_end_wraps_and_a_date_no_month_has_never_fires(
        gateway: Gateway, cron: str, next_fire_at: str | None) -> None:
    assert (await put(gateway, "odd", cron=cron))["next_fire_at"] == next_fire_at


async def test_a_schedule_id_leaves_room_for_the_fire_time(gateway: Gateway) -> None:
    await put(gateway, "x" * 43)
    refused = await put(gateway, "y" * 44, status=400)
    assert "43" in refused["error"]["message"]


async def test_pause_resume_trigger_and_delete(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await put(gateway, "ops")
    status, paused = await gateway.call("POST", "/v1/schedules/ops/pause", "t1",
                                        json={"reason": "holiday"})
    assert (status, paused["paused"], paused["next_fire_at"]) == (200, True, None)
    await trio.sleep(3600 + 15)  # 09:00:15: nothing fired while paused
    assert (await show(gateway, "ops"))["fires"] == []
    # A trigger fires now, paused or not: the job of this second; twice in it, one fire.
    for _ in range(2):
        status, triggered = await gateway.call("POST", "/v1/schedules/ops/trigger", "t1")
        assert status == 200, triggered
    assert fires(triggered) == [("2026-11-30T09:00:15Z", "ops@2026-11-30T09:00:15Z",
                                 "submitted")]
    assert await task_ids(gateway, "ops@") == ["ops@2026-11-30T09:00:15Z"]
    status, resumed = await gateway.call("POST", "/v1/schedules/ops/resume", "t1")
    assert (status, resumed["paused"], resumed["next_fire_at"]) == (
        200, False, "2026-11-30T09:10:00Z")  # the paused hour is not caught up
    status, body = await gateway.call("DELETE", "/v1/schedules/ops", "t1")
    assert (status, body) == (204, None)
    status, _ = await gateway.call("GET", "/v1/schedules/ops", "t1")
    assert status == 404
    await trio.sleep(3600)
    assert await task_ids(gateway, "ops@") == ["ops@2026-11-30T09:00:15Z"]  # the job stays


async def test_a_list_shows_each_schedules_own_last_fires(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await put(gateway, "a", cron="*/10 * * * *")
    await put(gateway, "b", cron="*/30 * * * *")
    await put(gateway, "idle", paused=True)
    await trio.sleep(3600 + 15)  # 09:00:15: a fired 6 times, b twice
    status, page = await gateway.call("GET", "/v1/schedules", "t1")
    assert status == 200, page
    listed = {s["schedule_id"]: s["fires"] for s in page["items"]}
    assert listed == {name: (await show(gateway, name))["fires"]
                      for name in ("a", "b", "idle")}
    assert (len(listed["a"]), len(listed["b"]), listed["idle"]) == (6, 2, [])


async def test_two_gateways_make_each_fire_once(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        engine: str, autojump_clock: trio.testing.MockClock) -> None:
    if engine == "sqlite":
        pytest.skip("one gateway per SQLite file")
    settings = settings.replace(deadline_poll_interval=1)
    a = await start_gateway(nursery, tmp_path / "leasegate.db",
                            settings.replace(gateway="gw-a"), clock)
    b = await start_gateway(nursery, tmp_path / "leasegate.db",
                            settings.replace(gateway="gw-b"), clock)
    await put(a, "both", cron="* * * * *", overlap="allow")
    await trio.sleep(5 * 60 + 1)
    expected = [f"both@2026-11-30T08:0{n}:00Z" for n in range(1, 6)]
    assert await task_ids(b, "both@") == expected
    assert [f[1] for f in fires(await show(b, "both"))] == expected
    assert {f[2] for f in fires(await show(a, "both"))} == {"submitted"}
