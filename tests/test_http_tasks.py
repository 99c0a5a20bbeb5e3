"""The task channel over HTTP: what upstreams, workers and operators rely on.

The task contract seen from the outside: status codes, the error
table, roles and tenants, fencing, lanes, long-polls, stale tasks and reclaim,
worker presence and ``/health``. The task actor's own transitions and races are
in ``test_tasks_actor.py``; this file checks that they reach a user intact.

Defaults: claim window 30 s, lease 120 s, worker offline after
90 s. Wall time starts at 2026-11-30T08:00:00Z; a test that asserts times runs
under the autojump clock, so ``trio.sleep(120)`` is two virtual minutes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

from tests.conftest import Gateway

pytestmark = pytest.mark.both_engines  # the behavioural suite: SQLite and PostgreSQL

Json = dict[str, Any]

ORDER: Json = {"site": "shop", "account": "acct-1", "kind": "place_order",
               "params": {"sku": "X1", "qty": 2}}
BATCH: Json = {"site": "shop", "account": "acct-b", "kind": "download",
               "params": {"ids": [1, 2, 3]}, "batch_total": 100}
RECLAIM: Json = {"action": "requeue", "reason": "checked the site: no order was placed"}


# ---- helpers ------------------------------------------------------------------------

def assert_error(status: int, body: Json, want_status: int, want_code: int) -> None:
    assert status == want_status, body
    assert body["error"]["code"] == want_code, body
    assert set(body["error"]) == {"code", "type", "message"}


async def call(gw: Gateway, method: str, path: str, who: str | None = None,
               body: Json | None = None) -> tuple[int, Json]:
    """``gw.call`` for JSON-object replies (every reply of this API is one)."""
    status, reply = await gw.call(method, path, who, json=body)
    assert isinstance(reply, dict), reply
    return status, reply


async def submit(gw: Gateway, who: str = "t1", **fields: Any) -> Json:
    """Submit ``ORDER`` with ``fields`` over it; it must be created."""
    status, reply = await call(gw, "POST", "/v1/tasks", who, {**ORDER, **fields})
    assert status == 201, reply
    return reply


async def lease(gw: Gateway, worker_id: str = "w1", **fields: Any) -> list[Json]:
    """One lease call (no waiting unless ``wait_seconds`` says so); the leases."""
    body = {"worker_id": worker_id, "wait_seconds": 0, **fields}
    status, reply = await gw.call("POST", "/v1/tasks/lease", "worker", json=body)
    assert status == 200, reply
    assert set(reply) == {"items"}
    items: list[Json] = reply["items"]
    return items


async def lease_one(gw: Gateway, worker_id: str = "w1", **fields: Any) -> Json:
    items = await lease(gw, worker_id, **fields)
    assert len(items) == 1, items
    return items[0]


def fence(item: Json, worker_id: str = "w1", **extra: Any) -> Json:
    """The body of a fenced worker call for the lease ``item``."""
    return {"worker_id": worker_id, "lease_token": item["lease_token"], **extra}


async def act(gw: Gateway, item: Json, action: str, body: Json) -> tuple[int, Json]:
    """A worker's ``start``/``renew``/``result`` on the task of ``item``."""
    return await call(gw, "POST", f"/v1/tasks/{item['task_id']}/{action}", "worker", body)


async def start(gw: Gateway, item: Json, worker_id: str = "w1") -> Json:
    status, reply = await act(gw, item, "start", fence(item, worker_id))
    assert status == 200, reply
    return reply


async def finish(gw: Gateway, item: Json, outcome: str = "succeeded", worker_id: str = "w1",
                 **extra: Any) -> Json:
    status, reply = await act(gw, item, "result", fence(item, worker_id, outcome=outcome, **extra))
    assert status == 200, reply
    return reply


async def get(gw: Gateway, task_id: str, who: str = "admin") -> Json:
    status, body = await call(gw, "GET", f"/v1/tasks/{task_id}", who)
    assert status == 200, body
    return body


async def control(gw: Gateway, task_id: str, action: str, who: str = "t1") -> Json:
    """A client's ``cancel``/``pause``/``resume``; it must succeed."""
    status, body = await call(gw, "POST", f"/v1/tasks/{task_id}/{action}", who)
    assert status == 200, body
    return body


async def running(gw: Gateway, task_id: str, worker_id: str = "w1", **fields: Any) -> Json:
    """Submit, lease and start one task (nothing else may be leasable); its lease."""
    await submit(gw, task_id=task_id, **fields)
    item = await lease_one(gw, worker_id)
    assert item["task_id"] == task_id
    await start(gw, item, worker_id)
    return item


async def health(gw: Gateway) -> Json:
    status, body = await call(gw, "GET", "/health", "admin")
    assert status == 200, body
    return body


async def workers(gw: Gateway) -> dict[str, Json]:
    status, body = await gw.call("GET", "/v1/workers", "admin")
    assert status == 200, body
    return {w["worker_id"]: w for w in body["items"]}


def key_id(gw: Gateway, who: str) -> str:
    return gw.keys[who].split("_")[1]  # lg_<key_id>_<secret>


# ---- the happy path -------------------------------------------------------------------

async def test_round_trip_with_exact_times(gateway: Gateway,
                                           autojump_clock: trio.testing.MockClock) -> None:
    status, created = await gateway.call("POST", "/v1/tasks", "t1",
                                         json={**ORDER, "task_id": "order-1"})
    assert (status, created) == (201, {"task_id": "order-1", "status": "queued",
                                       "created": True})
    await trio.sleep(5)
    item = await lease_one(gateway)
    assert item == {"task_id": "order-1", "site": "shop", "account": "acct-1",
                    "kind": "place_order", "params": {"sku": "X1", "qty": 2}, "progress": None,
                    "attempt": 1, "lease_token": item["lease_token"],
                    "claim_expires_at": "2026-11-30T08:00:35Z"}
    claimed = await get(gateway, "order-1", "t1")
    assert (claimed["status"], claimed["lease_owner"], claimed["lease_expires_at"],
            claimed["attempts"]) == ("leased", "w1", "2026-11-30T08:00:35Z", 0)

    await trio.sleep(5)
    assert await start(gateway, item) == {"task_id": "order-1", "status": "running",
                                          "lease_expires_at": "2026-11-30T08:02:10Z",
                                          "cancel_requested": False, "pause_requested": False}
    await trio.sleep(60)
    status, renewed = await act(gateway, item, "renew", fence(item, progress={"step": 2}))
    assert (status, renewed) == (200, {"lease_expires_at": "2026-11-30T08:03:10Z",
                                       "cancel_requested": False, "pause_requested": False})
    mid = await get(gateway, "order-1", "t1")
    assert (mid["status"], mid["progress"], mid["lease_expires_at"], mid["attempts"]) == (
        "running", {"step": 2}, "2026-11-30T08:03:10Z", 1)

    await trio.sleep(20)
    done = await finish(gateway, item, result={"order_no": "A-17"})
    assert done == await get(gateway, "order-1", "t1")
    assert done == {
        "task_id": "order-1", "tenant": "t1", "site": "shop", "account": "acct-1",
        "kind": "place_order", "params": {"sku": "X1", "qty": 2}, "priority": 0,
        "status": "succeeded", "device_id": None, "batch_total": None,
        "progress": {"step": 2}, "lease_owner": "w1", "lease_expires_at": None, "attempts": 1,
        "cancel_requested": False, "pause_requested": False,
        "created_at": "2026-11-30T08:00:00Z", "updated_at": "2026-11-30T08:01:30Z",
        "started_at": "2026-11-30T08:00:10Z", "completed_at": "2026-11-30T08:01:30Z",
        "result": {"order_no": "A-17"}, "error": None, "stale_reason": None, "reclaim": None,
        "billing": None, "late_result": False, "errors": [],
    }


async def test_submit_replay_and_conflict(gateway: Gateway) -> None:
    await submit(gateway, task_id="order-1")
    status, again = await gateway.call("POST", "/v1/tasks", "t1",
                                       json={**ORDER, "task_id": "order-1"})
    assert (status, again) == (200, {"task_id": "order-1", "status": "queued",
                                     "created": False})
    await lease_one(gateway)
    status, again = await gateway.call("POST", "/v1/tasks", "t1",
                                       json={**ORDER, "task_id": "order-1"})
    assert (status, again["created"], again["status"]) == (200, False, "leased")
    for change in ({"params": {"sku": "X1", "qty": 3}}, {"priority": 5}, {"account": "other"}):
        status, conflict = await gateway.call("POST", "/v1/tasks", "t1",
                                              json={**ORDER, "task_id": "order-1", **change})
        assert_error(status, conflict, 409, 6004)
        assert conflict["error"]["type"] == "idempotency_conflict"
    _, listed = await gateway.call("GET", "/v1/tasks", "t1")
    assert listed["total"] == 1


@pytest.mark.parametrize("name", ["lease", "batch", "start", "results", "redrive"])
async def test_route_names_are_no_job_ids(gateway: Gateway, name: str) -> None:
    # GET /v1/tasks/lease is the lease route's path (405): a job named so could never be
    # read. So are batch, start, results and redrive, on either channel.
    for path, body in (("/v1/tasks", {**ORDER, "task_id": name}),
                       ("/v1/queries", {"site": "shop", "kind": "k", "query_id": name})):
        status, reply = await gateway.call("POST", path, "t1", json=body)
        assert (status, reply["error"]["code"]) == (400, 4000)
        assert "reserved" in reply["error"]["message"]
    status, _ = await gateway.call("GET", f"/v1/tasks/{name}", "t1")
    assert status == 405


@pytest.mark.parametrize("not_before", [
    "1969-07-20T20:17:40Z", "0001-01-01T00:00:00+01:00", "2026-11-30T09:00:00+01:00",
    "2026-11-30t07:59:59.5z", "2016-12-31T23:59:60Z",
])
async def test_not_before_takes_any_rfc3339_date_time(gateway: Gateway,
                                                      not_before: str) -> None:
    # A time in the past (even before 1970) is simply "now": leasable at once.
    status, reply = await gateway.call("POST", "/v1/tasks", "t1", json={
        **ORDER, "task_id": "dated", "not_before": not_before})
    assert status == 201, reply
    assert [item["task_id"] for item in await lease(gateway)] == ["dated"]


@pytest.mark.parametrize("not_before", [
    1796025600, 1796025600.5, True, "1796025600", "2026-11-30", "2026-11-30T08:00:00",
    "2026-11-30 08:00:00Z", "2026-02-30T08:00:00Z", "2026-11-30T08:00Z", {"at": 1},
])
async def test_not_before_is_only_an_rfc3339_date_time(
        gateway: Gateway, not_before: object) -> None:
    # No Unix time in a number or a string, no bare date, no time without its offset:
    # exactly what the document's format says, or 400.
    status, reply = await gateway.call("POST", "/v1/tasks", "t1", json={
        **ORDER, "not_before": not_before})
    assert_error(status, reply, 400, 4000)
    assert "not_before" in reply["error"]["message"]


async def test_generated_ids_are_distinct(gateway: Gateway) -> None:
    ids = {(await submit(gateway))["task_id"] for _ in range(30)}
    assert len(ids) == 30


# ---- the error table ------------------------------------------------------------------

FAKE_FENCE: Json = {"worker_id": "w1", "lease_token": "no-such-token"}


@pytest.mark.parametrize(("who", "method", "suffix", "body"), [
    ("t1", "GET", "", None),
    ("admin", "GET", "", None),
    ("worker", "POST", "/start", FAKE_FENCE),
    ("worker", "POST", "/renew", FAKE_FENCE),
    ("worker", "POST", "/result", {**FAKE_FENCE, "outcome": "succeeded"}),
    ("t1", "POST", "/cancel", None),
    ("admin", "POST", "/reclaim", RECLAIM),
])
async def test_unknown_task_is_404_6001(gateway: Gateway, who: str, method: str, suffix: str,
                                        body: Json | None) -> None:
    status, reply = await gateway.call(method, f"/v1/tasks/nope{suffix}", who, json=body)
    assert_error(status, reply, 404, 6001)
    assert reply["error"]["type"] == "task_not_found"


async def test_fenced_calls_without_the_current_lease_are_409_6002(gateway: Gateway) -> None:
    await submit(gateway, task_id="order-1")
    item = await lease_one(gateway)
    forged = {**item, "lease_token": "forged"}
    refusals = [
        await act(gateway, forged, "start", fence(forged)),               # wrong token
        await act(gateway, item, "start", fence(item, "w2")),              # wrong worker
        await act(gateway, item, "renew", fence(item)),                    # not running yet
        await act(gateway, item, "result", fence(item, outcome="succeeded")),  # never started
    ]
    await start(gateway, item)
    refusals += [
        await act(gateway, forged, "renew", fence(forged)),
        await act(gateway, item, "renew", fence(item, "w2")),
        await act(gateway, forged, "result", fence(forged, outcome="failed")),
        await act(gateway, item, "result", fence(item, "w2", outcome="succeeded")),
    ]
    for status, reply in refusals:
        assert_error(status, reply, 409, 6002)
        assert reply["error"]["type"] == "task_lease_invalid"
    task = await get(gateway, "order-1")
    assert (task["status"], task["lease_owner"], task["attempts"]) == ("running", "w1", 1)
    await finish(gateway, item)
    status, reply = await act(gateway, item, "renew", fence(item))  # a finished task
    assert_error(status, reply, 409, 6002)


async def test_start_after_the_claim_window_is_409_6002(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, task_id="order-1")
    item = await lease_one(gateway)
    assert item["claim_expires_at"] == "2026-11-30T08:00:30Z"
    await trio.sleep(30)
    status, reply = await act(gateway, item, "start", fence(item))
    assert_error(status, reply, 409, 6002)
    task = await get(gateway, "order-1")
    # Never started, so provably never executed: queued again, no attempt burned.
    assert (task["status"], task["lease_owner"], task["attempts"]) == ("queued", None, 0)
    again = await lease_one(gateway, "w2")
    assert again["lease_token"] != item["lease_token"] and again["attempt"] == 1
    assert again["claim_expires_at"] == "2026-11-30T08:01:00Z"


async def test_state_conflicts_are_409_6003(gateway: Gateway) -> None:
    item = await running(gateway, "running-one", account="a-r")
    await submit(gateway, task_id="queued-one", account="a-q")
    for task_id in ("queued-one", "running-one"):  # reclaim is only for stale tasks
        status, reply = await gateway.call("POST", f"/v1/tasks/{task_id}/reclaim", "admin",
                                           json=RECLAIM)
        assert_error(status, reply, 409, 6003)
        assert reply["error"]["type"] == "state_conflict"
    await finish(gateway, item)
    for path, body in (("/v1/tasks/running-one/cancel", None),
                       ("/v1/tasks/running-one/reclaim", RECLAIM)):
        status, reply = await gateway.call("POST", path, "admin", json=body)
        assert_error(status, reply, 409, 6003)
    assert (await get(gateway, "running-one"))["status"] == "succeeded"
    assert (await get(gateway, "queued-one"))["status"] == "queued"


async def test_paused_outcome_of_a_task_that_is_not_a_batch_is_a_conflict(
        gateway: Gateway) -> None:
    # The body is valid (the document allows it); the task is what cannot pause: 409.
    item = await running(gateway, "order-1")
    status, reply = await act(gateway, item, "result",
                              fence(item, outcome="paused", progress={"done": 1}))
    assert_error(status, reply, 409, 6003)
    assert "not a batch task" in reply["error"]["message"]
    assert (await get(gateway, "order-1"))["status"] == "running"


@pytest.mark.parametrize("change", [
    {"priority": 10},
    {"priority": -1},
    {"batch_total": 0},
    {"account": "has space"},
    {"task_id": "x" * 65},
    {"unexpected": 1},
    {"not_before": "tomorrow"},
    {"not_before": "2026-13-40T08:00:00Z"},
    {"params": ["not", "an", "object"]},
    {"max_cost": -1},
])
async def test_bad_submit_is_400_and_changes_nothing(gateway: Gateway, change: Json) -> None:
    status, reply = await gateway.call("POST", "/v1/tasks", "t1", json={**ORDER, **change})
    assert_error(status, reply, 400, 4000)
    _, listed = await gateway.call("GET", "/v1/tasks", "admin")
    assert listed["total"] == 0


@pytest.mark.parametrize(("who", "suffix", "body"), [
    ("worker", "lease", {"worker_id": "w2", "wait_seconds": 31}),
    ("worker", "lease", {"worker_id": "w2", "max": 101}),
    ("worker", "lease", {"worker_id": "w2", "max": 0}),
    ("worker", "lease", {"worker_id": "w w"}),
    ("worker", "lease", {"worker_id": "w2", "sites": []}),
    ("worker", "order-1/start", {"worker_id": "w1"}),
    ("worker", "order-1/renew", {**FAKE_FENCE, "progress": [1, 2]}),
    ("worker", "order-1/result", {**FAKE_FENCE, "outcome": "done"}),
    ("worker", "order-1/result", {**FAKE_FENCE, "outcome": "failed", "cost": -1}),
    ("admin", "order-1/reclaim", {"action": "retry", "reason": "r"}),
    ("admin", "order-1/reclaim", {"action": "requeue", "reason": ""}),
    ("admin", "order-1/reclaim", {"action": "requeue"}),
])
async def test_bad_worker_and_operator_bodies_are_400(gateway: Gateway, who: str, suffix: str,
                                                      body: Json) -> None:
    item = await running(gateway, "order-1")
    await submit(gateway, task_id="other", account="acct-2")
    status, reply = await call(gateway, "POST", f"/v1/tasks/{suffix}", who, body)
    assert_error(status, reply, 400, 4000)
    task = await get(gateway, "order-1")
    assert (task["status"], task["lease_owner"], task["progress"]) == ("running", "w1", None)
    assert (await get(gateway, "other"))["status"] == "queued"
    await finish(gateway, item)


async def test_json_fields_over_64_kib_are_413(gateway: Gateway) -> None:
    big = {"x": "a" * (65 * 1024)}
    status, reply = await gateway.call("POST", "/v1/tasks", "t1", json={**ORDER, "params": big})
    assert_error(status, reply, 413, 4130)
    assert (await gateway.call("GET", "/v1/tasks", "t1"))[1]["total"] == 0
    item = await running(gateway, "order-1")
    status, reply = await act(gateway, item, "renew", fence(item, progress=big))
    assert_error(status, reply, 413, 4130)
    status, reply = await act(gateway, item, "result", fence(item, outcome="succeeded",
                                                             result=big))
    assert_error(status, reply, 413, 4130)
    task = await get(gateway, "order-1")
    assert (task["status"], task["progress"]) == ("running", None)


# ---- roles and tenants ----------------------------------------------------------------

@pytest.mark.parametrize(("who", "method", "path", "body"), [
    ("worker", "POST", "/v1/tasks", ORDER),
    ("admin", "POST", "/v1/tasks", ORDER),  # work belongs to a tenant
    ("worker", "POST", "/v1/tasks/order-1/cancel", None),
    ("worker", "GET", "/v1/tasks/order-1", None),
    ("worker", "GET", "/v1/tasks", None),
    ("t1", "POST", "/v1/tasks/lease", {"worker_id": "w1", "wait_seconds": 0}),
    ("t1", "POST", "/v1/tasks/order-1/start", FAKE_FENCE),
    ("t1", "POST", "/v1/tasks/order-1/renew", FAKE_FENCE),
    ("t1", "POST", "/v1/tasks/order-1/result", {**FAKE_FENCE, "outcome": "succeeded"}),
    ("t1", "POST", "/v1/tasks/order-1/reclaim", RECLAIM),
    ("worker", "POST", "/v1/tasks/order-1/reclaim", RECLAIM),
    ("t1", "GET", "/v1/workers", None),
    ("worker", "GET", "/v1/workers", None),
])
async def test_wrong_role_is_403_and_changes_nothing(gateway: Gateway, who: str, method: str,
                                                     path: str, body: Json | None) -> None:
    await submit(gateway, task_id="order-1")
    status, reply = await gateway.call(method, path, who, json=body)
    assert_error(status, reply, 403, 4030)
    _, listed = await gateway.call("GET", "/v1/tasks", "admin")
    assert [(t["task_id"], t["status"]) for t in listed["items"]] == [("order-1", "queued")]


async def test_tenants_see_only_their_own_tasks(gateway: Gateway) -> None:
    await submit(gateway, "t1", task_id="mine")
    await submit(gateway, "t2", task_id="theirs", account="acct-2")
    for method, suffix in (("GET", ""), ("POST", "/cancel")):
        status, reply = await gateway.call(method, f"/v1/tasks/mine{suffix}", "t2")
        assert_error(status, reply, 404, 6001)  # 404, never 403
    assert (await get(gateway, "mine", "t1"))["status"] == "queued"  # not canceled
    for who, own in (("t1", "mine"), ("t2", "theirs")):
        _, listed = await gateway.call("GET", "/v1/tasks", who)
        assert [t["task_id"] for t in listed["items"]] == [own] and listed["total"] == 1
    _, everything = await gateway.call("GET", "/v1/tasks", "admin")
    assert [t["task_id"] for t in everything["items"]] == ["theirs", "mine"]  # newest first
    assert everything["total"] == 2
    assert (await get(gateway, "theirs", "admin"))["tenant"] == "t2"
    assert (await control(gateway, "theirs", "cancel", "admin"))["status"] == "canceled"


async def test_list_filters(gateway: Gateway) -> None:
    await submit(gateway, task_id="a", site="s1")
    await submit(gateway, task_id="b", site="s2")
    await submit(gateway, task_id="c", site="s2", account="acct-2", kind="refund")
    await lease_one(gateway, sites=["s1"])
    for query, want in (("?site=s2", ["c", "b"]), ("?status=leased", ["a"]),
                        ("?kind=refund", ["c"]), ("?account=acct-1&status=queued", ["b"]),
                        ("?limit=1&offset=1", ["b"])):
        status, listed = await gateway.call("GET", f"/v1/tasks{query}", "t1")
        assert status == 200 and [t["task_id"] for t in listed["items"]] == want, query
    status, reply = await gateway.call("GET", "/v1/tasks?status=bogus", "t1")
    assert_error(status, reply, 400, 4000)


# ---- cancel ---------------------------------------------------------------------------

async def test_cancel_a_queued_task(gateway: Gateway,
                                    autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, task_id="order-1")
    await trio.sleep(3)
    canceled = await control(gateway, "order-1", "cancel")
    assert (canceled["status"], canceled["completed_at"]) == ("canceled",
                                                              "2026-11-30T08:00:03Z")
    assert await lease(gateway) == []


async def test_cancel_a_leased_task_fences_off_its_start(gateway: Gateway) -> None:
    await submit(gateway, task_id="order-1")
    await submit(gateway, task_id="order-2")  # same lane
    item = await lease_one(gateway)
    canceled = await control(gateway, "order-1", "cancel")
    assert (canceled["status"], canceled["lease_owner"], canceled["attempts"]) == (
        "canceled", None, 0)
    status, reply = await act(gateway, item, "start", fence(item))
    assert_error(status, reply, 409, 6002)
    assert (await get(gateway, "order-1"))["status"] == "canceled"
    assert (await lease_one(gateway))["task_id"] == "order-2"  # the lane is free


async def test_cancel_a_running_task_asks_the_worker(gateway: Gateway) -> None:
    item = await running(gateway, "order-1")
    asked = await control(gateway, "order-1", "cancel")
    assert (asked["status"], asked["cancel_requested"]) == ("running", True)
    status, renewed = await act(gateway, item, "renew", fence(item))
    assert status == 200
    assert (renewed["cancel_requested"], renewed["pause_requested"]) == (True, False)
    assert (await get(gateway, "order-1", "t1"))["cancel_requested"] is True
    # The worker decides how it ends.
    done = await finish(gateway, item, "canceled", error={"message": "stopped before paying"})
    assert (done["status"], done["error"]) == ("canceled", {"code": None,
                                                            "message": "stopped before paying",
                                                            "type": None, "traceback": None})


# ---- retries after lost responses -------------------------------------------------------

async def test_retries_with_the_same_token_are_safe(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, task_id="order-1")
    item = await lease_one(gateway)
    first = await start(gateway, item)
    await trio.sleep(5)
    assert await start(gateway, item) == first  # the same lease, not a second attempt
    assert (await get(gateway, "order-1"))["attempts"] == 1
    renew = fence(item, progress={"step": 1})
    assert await act(gateway, item, "renew", renew) == await act(gateway, item, "renew", renew)

    body = fence(item, outcome="failed", error={"code": 17, "message": "sold out"})
    status, done = await act(gateway, item, "result", body)
    assert status == 200 and done["error"] == {"code": 17, "message": "sold out",
                                                        "type": None, "traceback": None}
    await trio.sleep(5)
    assert await act(gateway, item, "result", body) == (200, done)
    status, reply = await act(gateway, item, "result", fence(item, outcome="succeeded"))
    assert_error(status, reply, 409, 6002)
    assert (await get(gateway, "order-1")) == done


async def test_another_outcome_after_success_is_409_6002(gateway: Gateway) -> None:
    item = await running(gateway, "order-1")
    body = fence(item, outcome="succeeded", result={"order_no": "A-1"})
    assert (await act(gateway, item, "result", body))[0] == 200
    assert (await act(gateway, item, "result", body))[0] == 200
    for other in ({"outcome": "failed"}, {"result": {"order_no": "A-2"}}):
        status, reply = await act(gateway, item, "result", {**body, **other})
        assert_error(status, reply, 409, 6002)
    assert (await get(gateway, "order-1"))["result"] == {"order_no": "A-1"}


# ---- lanes ----------------------------------------------------------------------------

async def test_one_task_in_flight_per_lane(gateway: Gateway) -> None:
    await submit(gateway, task_id="first")
    await submit(gateway, task_id="second")  # same site and account
    item = await lease_one(gateway, max=10)
    assert item["task_id"] == "first"
    assert await lease(gateway, "w2", max=10) == []  # the lane is leased
    await start(gateway, item)
    assert await lease(gateway, "w2", max=10) == []  # the lane is running
    await submit(gateway, task_id="elsewhere", account="acct-2")
    assert [i["task_id"] for i in await lease(gateway, "w2", max=10)] == ["elsewhere"]
    await finish(gateway, item)
    assert [i["task_id"] for i in await lease(gateway, "w2", max=10)] == ["second"]


async def test_max_ten_hands_out_distinct_lanes_only(gateway: Gateway) -> None:
    for n in range(3):
        await submit(gateway, task_id=f"x{n}", account="x")
    for n in range(2):
        await submit(gateway, task_id=f"y{n}", account="y")
    await submit(gateway, task_id="z0", site="other-shop", account="x")
    items = await lease(gateway, max=10)
    assert sorted(i["task_id"] for i in items) == ["x0", "y0", "z0"]
    assert len({(i["site"], i["account"]) for i in items}) == 3
    assert len({i["lease_token"] for i in items}) == 3
    assert await lease(gateway, "w2", max=10) == []


async def test_priority_then_oldest(gateway: Gateway) -> None:
    await submit(gateway, task_id="old-low", account="a")
    await submit(gateway, task_id="new-high", account="b", priority=9)
    await submit(gateway, task_id="newer-low", account="c")
    order = [(await lease_one(gateway))["task_id"] for _ in range(3)]
    assert order == ["new-high", "old-low", "newer-low"]


async def b_only_key_and_a_task_on_a(gw: Gateway) -> None:
    """A worker key limited to site shop-b (the caller "b-only"); task on-a on shop-a."""
    status, created = await call(gw, "POST", "/v1/admin/keys", "admin",
                                 {"role": "worker", "name": "b-only", "sites": ["shop-b"]})
    assert status == 201
    gw.keys["b-only"] = created["key"]
    await submit(gw, task_id="on-a", site="shop-a")


async def test_a_site_limited_key_leases_only_its_sites(gateway: Gateway) -> None:
    await b_only_key_and_a_task_on_a(gateway)
    await submit(gateway, task_id="on-b", site="shop-b")
    status, reply = await call(gateway, "POST", "/v1/tasks/lease", "b-only",
                               {"worker_id": "wb", "wait_seconds": 0, "sites": ["shop-a"]})
    assert_error(status, reply, 403, 4030)
    status, leased = await call(gateway, "POST", "/v1/tasks/lease", "b-only",
                                {"worker_id": "wb", "wait_seconds": 0, "max": 10})
    assert status == 200 and [i["task_id"] for i in leased["items"]] == ["on-b"]


async def test_a_site_limited_key_may_not_work_on_another_sites_task(gateway: Gateway) -> None:
    await b_only_key_and_a_task_on_a(gateway)
    item = await lease_one(gateway)  # by the unrestricted key, as worker w1
    status, reply = await call(gateway, "POST", "/v1/tasks/on-a/start", "b-only", fence(item))
    assert_error(status, reply, 403, 4030)
    assert (await get(gateway, "on-a"))["status"] == "leased"
    await start(gateway, item)
    for action, body in (("renew", fence(item)), ("result", fence(item, outcome="failed"))):
        status, reply = await call(gateway, "POST", f"/v1/tasks/on-a/{action}", "b-only", body)
        assert_error(status, reply, 403, 4030)
    assert (await get(gateway, "on-a"))["status"] == "running"


# ---- long-polls ---------------------------------------------------------------------------

async def waiting_lease(gw: Gateway, got: list[tuple[float, list[Json]]],
                       worker_id: str = "w2", wait: float = 30) -> None:
    """A long-polling worker; appends (virtual time of the reply, its leases)."""
    items = await lease(gw, worker_id, wait_seconds=wait)
    got.append((trio.current_time(), items))


async def test_long_poll_is_answered_when_a_task_is_submitted(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    got: list[tuple[float, list[Json]]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_lease, gateway, got)
        await trio.sleep(7)
        await submit(gateway, task_id="late")
    [(when, items)] = got
    assert when == 7
    assert [(i["task_id"], i["claim_expires_at"]) for i in items] == [
        ("late", "2026-11-30T08:00:37Z")]


async def test_long_poll_is_answered_when_a_lane_frees(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    item = await running(gateway, "first")
    await submit(gateway, task_id="second")  # waits for the lane
    got: list[tuple[float, list[Json]]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_lease, gateway, got)
        await trio.sleep(12)
        assert got == []
        await finish(gateway, item)
    [(when, items)] = got
    assert when == 12
    assert [(i["task_id"], i["claim_expires_at"]) for i in items] == [
        ("second", "2026-11-30T08:00:42Z")]
    assert (await get(gateway, "second"))["lease_owner"] == "w2"


async def test_long_poll_ends_with_an_empty_list(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await running(gateway, "busy")
    await submit(gateway, task_id="blocked")  # its lane is busy: not leasable
    got: list[tuple[float, list[Json]]] = []
    await waiting_lease(gateway, got)
    assert got == [(30, [])]
    assert (await get(gateway, "blocked"))["status"] == "queued"
    status, reply = await call(gateway, "POST", "/v1/tasks/lease", "worker",
                               {"worker_id": "w2"})  # wait_seconds defaults to 20
    assert (status, reply, trio.current_time()) == (200, {"items": []}, 50)


@pytest.mark.parametrize("not_before", ["2026-11-30T08:00:10Z", "2026-11-30T10:00:10+02:00"])
async def test_not_before_is_served_to_a_parked_lease_exactly_then(
        gateway: Gateway, autojump_clock: trio.testing.MockClock, not_before: str) -> None:
    await submit(gateway, task_id="later", not_before=not_before)
    assert await lease(gateway) == []
    got: list[tuple[float, list[Json]]] = []
    await waiting_lease(gateway, got)
    [(when, items)] = got
    assert when == 10 and [i["task_id"] for i in items] == ["later"]


@pytest.fixture
def server_in_new_york() -> Iterator[None]:
    """The process's local time zone is not UTC (as on many operators' machines)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


async def test_a_not_before_without_a_zone_is_utc_or_refused(
        gateway: Gateway, autojump_clock: trio.testing.MockClock,
        server_in_new_york: None) -> None:
    status, reply = await call(gateway, "POST", "/v1/tasks", "t1",
                               {**ORDER, "task_id": "naive", "not_before": "2026-11-30T08:00:10"})
    if status == 400:  # refusing it is as good as reading it as UTC
        assert_error(status, reply, 400, 4000)
        return
    assert status == 201, reply
    got: list[tuple[float, list[Json]]] = []
    await waiting_lease(gateway, got)
    assert [(when, [i["task_id"] for i in items]) for when, items in got] == [(10, ["naive"])]


# ---- stale tasks and reclaim ----------------------------------------------------------------

async def make_stale(gw: Gateway, task_id: str = "order-1") -> Json:
    """Start a task at 08:00:00 and let its lease lapse (120 s without renew)."""
    item = await running(gw, task_id)
    await trio.sleep(120)
    return item


async def test_bulk_reclaim_previews_then_resolves_the_matching_stale_tasks(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    """POST /v1/tasks/reclaim: every stale task the filters match, the first to have gone
    stale first, with one outcome and one reason; a dry run counts them only."""
    for n, (site, account) in enumerate((("shop", "a0"), ("shop", "a1"), ("shop", "a2"),
                                         ("mall", "a0"))):
        await running(gateway, f"s{n}", site=site, account=account)
        await trio.sleep(1)  # they go stale a second apart: s0 first
    await trio.sleep(120)
    body = {"reason": "the site shows no orders", "action": "failed", "site": "shop"}
    status, reply = await gateway.call("POST", "/v1/tasks/reclaim", "admin",
                                       json={**body, "dry_run": True})
    assert (status, reply) == (200, {"matched": 3, "reclaimed": 0})
    assert [(await get(gateway, f"s{n}", "t1"))["status"] for n in range(4)] == ["stale"] * 4
    status, reply = await gateway.call("POST", "/v1/tasks/reclaim", "admin",
                                       json={**body, "limit": 2})
    assert (status, reply) == (200, {"matched": 3, "reclaimed": 2})
    assert [(await get(gateway, f"s{n}", "t1"))["status"] for n in range(4)] == [
        "failed", "failed", "stale", "stale"]
    reclaimed = await get(gateway, "s0", "t1")
    assert reclaimed["reclaim"]["reason"] == "the site shows no orders"
    assert reclaimed["reclaim"]["action"] == "failed"
    status, reply = await gateway.call("POST", "/v1/tasks/reclaim", "admin", json={
        "reason": "one by one", "action": "requeue", "account": "a0"})
    assert (status, reply) == (200, {"matched": 1, "reclaimed": 1})  # s3 (mall); s0 is done
    assert (await get(gateway, "s3", "t1"))["status"] == "queued"
    for bad in ({"action": "failed"}, {"reason": "x", "action": "retry"},
                {"reason": "x", "action": "failed", "limit": 0},
                {"reason": "x", "action": "failed", "since": "yesterday"}):
        status, reply = await gateway.call("POST", "/v1/tasks/reclaim", "admin", json=bad)
        assert_error(status, reply, 400, 4000)
    status, reply = await gateway.call("POST", "/v1/tasks/reclaim", "worker", json=body)
    assert_error(status, reply, 403, 4030)
    assert (await get(gateway, "s2", "t1"))["status"] == "stale"  # refusals change nothing


async def test_a_lapsed_lease_makes_the_task_stale_and_reclaim_requeues_it(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    item = await make_stale(gateway)
    stale = await get(gateway, "order-1", "t1")
    assert (stale["status"], stale["lease_expires_at"], stale["attempts"]) == ("stale", None, 1)
    assert stale["stale_reason"] == (
        "lease_expired: worker w1 stopped renewing at 2026-11-30T08:00:00Z")
    report = await health(gateway)
    assert report["status"] == "degraded"
    assert report["checks"]["stale_tasks"] == 1
    assert report["details"]["blocked_lanes"] == [{
        "site": "shop", "account": "acct-1", "task_id": "order-1",
        "since": "2026-11-30T08:02:00Z"}]
    # Never retried automatically; the worker's renew is refused; the lane stays blocked.
    status, reply = await act(gateway, item, "renew", fence(item))
    assert_error(status, reply, 409, 6002)
    await submit(gateway, task_id="behind")
    assert await lease(gateway, "w2") == []
    status, reply = await gateway.call("POST", "/v1/tasks/order-1/cancel", "t1")
    assert_error(status, reply, 409, 6003)

    await trio.sleep(30)
    status, requeued = await gateway.call("POST", "/v1/tasks/order-1/reclaim", "admin",
                                          json=RECLAIM)
    assert status == 200
    assert (requeued["status"], requeued["lease_owner"], requeued["attempts"]) == (
        "queued", None, 1)
    assert requeued["reclaim"] == {
        "action": "requeue", "reason": "checked the site: no order was placed",
        "by": f"admin ({key_id(gateway, 'admin')})", "at": "2026-11-30T08:02:30Z"}
    assert await get(gateway, "order-1", "t1") == requeued
    report = await health(gateway)
    assert (report["checks"]["stale_tasks"], report["details"]["blocked_lanes"]) == (0, [])

    again = await lease_one(gateway, "w2")  # the oldest task of the lane
    assert again["task_id"] == "order-1" and again["attempt"] == 2
    assert again["lease_token"] != item["lease_token"]
    assert (await start(gateway, again, "w2"))["lease_expires_at"] == "2026-11-30T08:04:30Z"
    for who in ("w1", "w2"):  # the old token is dead, whoever presents it
        status, reply = await act(gateway, item, "result",
                                  fence(item, who, outcome="succeeded"))
        assert_error(status, reply, 409, 6002)
    task = await get(gateway, "order-1")
    assert (task["status"], task["lease_owner"], task["attempts"]) == ("running", "w2", 2)


@pytest.mark.parametrize(("action", "status", "result"), [
    ("succeeded", "succeeded", {"order_no": "seen on the site"}),
    ("failed", "failed", None),
])
async def test_reclaim_to_a_final_state(gateway: Gateway, autojump_clock: trio.testing.MockClock,
                                        action: str, status: str, result: Json | None) -> None:
    await make_stale(gateway)
    code, done = await gateway.call("POST", "/v1/tasks/order-1/reclaim", "admin", json={
        "action": action, "reason": "looked at the site", "result": result})
    assert code == 200
    assert (done["status"], done["completed_at"]) == (status, "2026-11-30T08:02:00Z")
    assert done["reclaim"]["action"] == action
    assert (await health(gateway))["status"] == "ok"


async def test_a_late_result_of_the_last_lease_is_accepted(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    item = await make_stale(gateway)
    await submit(gateway, task_id="behind")
    await trio.sleep(10)
    done = await finish(gateway, item, result={"order_no": "A-9"})
    assert (done["status"], done["late_result"], done["result"], done["completed_at"]) == (
        "succeeded", True, {"order_no": "A-9"}, "2026-11-30T08:02:10Z")
    assert done["stale_reason"] is not None  # the history stays visible
    assert (await health(gateway))["details"]["blocked_lanes"] == []
    assert (await lease_one(gateway, "w2"))["task_id"] == "behind"  # the lane is free


async def test_a_late_result_with_another_token_is_refused(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    item = await make_stale(gateway)
    for body in (fence({"lease_token": "older"}, outcome="succeeded"),
                 fence(item, "w2", outcome="succeeded")):
        status, reply = await act(gateway, item, "result", body)
        assert_error(status, reply, 409, 6002)
    assert (await get(gateway, "order-1"))["status"] == "stale"


# ---- workers and /health --------------------------------------------------------------------

async def test_workers_are_listed_online_then_offline(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, task_id="order-1")
    item = await lease_one(gateway, sites=["shop"])
    await trio.sleep(2)
    await start(gateway, item)
    assert await workers(gateway) == {"w1": {
        "worker_id": "w1", "state": "online", "last_seen_at": "2026-11-30T08:00:02Z",
        "task_ids": ["order-1"], "sites": ["shop"], "channels": ["tasks"]}}
    await trio.sleep(89)
    assert (await workers(gateway))["w1"]["state"] == "online"
    await trio.sleep(2)  # 91 s without contact
    assert await workers(gateway) == {"w1": {
        "worker_id": "w1", "state": "offline", "last_seen_at": "2026-11-30T08:00:02Z",
        "task_ids": ["order-1"], "sites": ["shop"], "channels": ["tasks"]}}


async def test_a_query_worker_is_seen_and_never_hides_a_dead_task_loop(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    """Query lease calls make a worker present too, with the sites they serve; a worker
    seen only on queries does not serve the sites of queued tasks (/health)."""
    status, reply = await call(gateway, "POST", "/v1/queries/lease", "worker",
                               {"worker_id": "q1", "wait_seconds": 0, "sites": ["bank"]})
    assert status == 200, reply
    await trio.sleep(1)  # told to the task actor after the query actor's commit
    assert await workers(gateway) == {"q1": {
        "worker_id": "q1", "state": "online", "last_seen_at": "2026-11-30T08:00:00Z",
        "task_ids": [], "sites": ["bank"], "channels": ["queries"]}}
    await submit(gateway, task_id="order-1", site="bank")
    assert (await health(gateway))["checks"]["sites_without_worker"] == 1
    item = await lease_one(gateway, "q1", sites=["shop", "bank"])
    await trio.sleep(1)
    assert (await workers(gateway))["q1"] == {
        "worker_id": "q1", "state": "online", "last_seen_at": "2026-11-30T08:00:01Z",
        "task_ids": [item["task_id"]], "sites": ["bank", "shop"],
        "channels": ["tasks", "queries"]}


async def test_every_worker_call_is_a_heartbeat(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    item = await running(gateway, "order-1")
    await trio.sleep(80)
    await act(gateway, item, "renew", fence(item))
    await trio.sleep(80)
    assert (await workers(gateway))["w1"]["state"] == "online"
    await finish(gateway, item)
    await trio.sleep(80)
    seen = (await workers(gateway))["w1"]
    assert (seen["state"], seen["last_seen_at"], seen["task_ids"]) == (
        "online", "2026-11-30T08:02:40Z", [])


async def test_health_names_sites_without_a_worker(gateway: Gateway) -> None:
    assert (await health(gateway))["status"] == "ok"
    await submit(gateway, task_id="busy")
    await submit(gateway, task_id="alone", site="lonely")
    report = await health(gateway)
    assert report["status"] == "degraded"
    assert sorted(report["details"]["sites_without_worker"]) == ["lonely", "shop"]
    assert report["details"]["queued"]["tasks"] == {"lonely": 1, "shop": 1}
    assert (await lease_one(gateway, "w-shop", sites=["shop"]))["task_id"] == "busy"
    report = await health(gateway)  # a worker limited to "shop" does not serve "lonely"
    assert (report["status"], report["details"]["sites_without_worker"]) == (
        "degraded", ["lonely"])
    assert await lease(gateway, "w-any", sites=["shop"]) == []
    await lease(gateway, "w-any")  # no sites: every site; it gets "alone" or nothing
    report = await health(gateway)
    assert (report["status"], report["details"]["sites_without_worker"]) == ("ok", [])


async def test_a_worker_serving_every_site_serves_a_site_it_never_leased(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, task_id="first")
    await lease_one(gateway, "w-any")  # sites null
    await submit(gateway, task_id="alone", site="lonely")
    report = await health(gateway)
    assert (report["status"], report["details"]["sites_without_worker"]) == ("ok", [])
    await trio.sleep(91)  # w-any is offline; its claim on "first" lapsed at 30 s
    report = await health(gateway)
    assert report["status"] == "degraded"
    assert sorted(report["details"]["sites_without_worker"]) == ["lonely", "shop"]


# ---- pause and resume (batch tasks) ----------------------------------------------------------

async def test_pause_and_resume_a_queued_batch_task(gateway: Gateway) -> None:
    await submit(gateway, task_id="batch-1", **BATCH)
    paused = await control(gateway, "batch-1", "pause")
    assert (paused["status"], paused["pause_requested"]) == ("paused", False)
    assert await lease(gateway) == []  # a paused task holds no place in the queue
    assert (await control(gateway, "batch-1", "resume"))["status"] == "queued"
    assert (await lease_one(gateway))["task_id"] == "batch-1"


async def test_pause_a_running_batch_task_and_resume_from_its_checkpoint(
        gateway: Gateway) -> None:
    item = await running(gateway, "batch-1", **BATCH)
    asked = await control(gateway, "batch-1", "pause")
    assert (asked["status"], asked["pause_requested"]) == ("running", True)
    status, renewed = await act(gateway, item, "renew", fence(item, progress={"done": 30}))
    assert status == 200
    assert (renewed["cancel_requested"], renewed["pause_requested"]) == (False, True)
    paused = await finish(gateway, item, "paused", progress={"done": 40})
    assert (paused["status"], paused["progress"], paused["completed_at"],
            paused["pause_requested"]) == ("paused", {"done": 40}, None, False)
    await submit(gateway, task_id="next-in-lane", **{**BATCH, "params": {"ids": [4]}})
    assert (await lease_one(gateway))["task_id"] == "next-in-lane"  # the lane was released
    assert (await lease(gateway, "w2")) == []  # batch-1 stays paused
    status, reply = await gateway.call("POST", "/v1/tasks/batch-1/pause", "t2")
    assert_error(status, reply, 404, 6001)

    assert (await control(gateway, "batch-1", "resume"))["status"] == "queued"
    await submit(gateway, task_id="elsewhere", **{**BATCH, "account": "acct-c"})
    resumed = await lease(gateway, "w2", max=10)
    assert [i["task_id"] for i in resumed] == ["elsewhere"]  # its lane is busy again
    await gateway.call("POST", "/v1/tasks/next-in-lane/cancel", "t1")
    again = await lease_one(gateway, "w2")
    assert (again["task_id"], again["progress"], again["attempt"]) == (
        "batch-1", {"done": 40}, 2)


async def test_pause_and_resume_need_a_batch_task(gateway: Gateway) -> None:
    await submit(gateway, task_id="order-1")
    for action in ("pause", "resume"):  # a conflict with what the task is, as any state's
        status, reply = await gateway.call("POST", f"/v1/tasks/order-1/{action}", "t1")
        assert_error(status, reply, 409, 6003)
        assert "not a batch task" in reply["error"]["message"]
    await submit(gateway, task_id="batch-1", **BATCH)
    await control(gateway, "batch-1", "cancel")
    for action in ("pause", "resume"):
        status, reply = await gateway.call("POST", f"/v1/tasks/batch-1/{action}", "t1")
        assert_error(status, reply, 409, 6003)


# ---- OpenAPI ------------------------------------------------------------------------------

async def test_openapi_describes_every_task_path(gateway: Gateway) -> None:
    response = await gateway.client.get("/openapi.json")
    assert response.status_code == 200
    paths = (await response.get_json())["paths"]
    want = {
        "/v1/tasks": {"get", "post"},
        "/v1/tasks/{task_id}": {"get"},
        "/v1/tasks/lease": {"post"},
        **{f"/v1/tasks/{{task_id}}/{action}": {"post"}
           for action in ("cancel", "pause", "resume", "start", "renew", "result", "reclaim")},
        "/v1/workers": {"get"},
        "/health": {"get"},
    }
    for path, methods in want.items():
        assert path in paths, path
        assert methods <= set(paths[path]), (path, paths[path])


async def test_health_without_a_key_does_not_name_accounts_or_tasks(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await running(gateway, "secret-order", account="alice")
    await trio.sleep(121)  # the lease lapses: stale, the lane is blocked
    status, public = await call(gateway, "GET", "/health")
    assert status == 200 and public["status"] == "degraded"
    assert public["checks"]["blocked_lanes"] == 1 and "details" not in public
    detailed = await health(gateway)
    [lane] = detailed["details"]["blocked_lanes"]
    assert (lane["account"], lane["task_id"]) == ("alice", "secret-order")
    status, client_view = await call(gateway, "GET", "/health", "t1")
    assert (status, client_view) == (200, public)


async def test_text_holding_nul_is_a_400_on_both_engines(gateway: Gateway) -> None:
    """PostgreSQL cannot store NUL in text: refused at the edge on both engines, the
    same 400 and nothing changed; inside a JSON field it is stored escaped, and kept."""
    item = await running(gateway, "nul", params={"note": "a\x00b"})
    assert (await get(gateway, "nul"))["params"] == {"note": "a\x00b"}
    refusals: list[tuple[str, str, str, Json]] = [
        ("worker", "POST", "/v1/tasks/nul/result",
         fence(item, outcome="failed", error={"message": "bad\x00byte"})),
        ("worker", "POST", "/v1/tasks/nul/renew", {"worker_id": "w1", "lease_token": "t\x00"}),
        ("admin", "POST", "/v1/tasks/nul/reclaim", {"action": "fail", "reason": "r\x00"}),
        ("admin", "POST", "/v1/admin/keys", {"role": "admin", "name": "n\x00"}),
        ("admin", "POST", "/v1/ledger/accounts/t1/credit",
         {"amount": 5, "ref": "p1", "memo": "m\x00"}),
    ]
    for who, method, path, body in refusals:
        status, reply = await call(gateway, method, path, who, body)
        assert_error(status, reply, 400, 4000)
        assert "NUL" in reply["error"]["message"], (path, reply)
    assert (await get(gateway, "nul"))["status"] == "running"
    status, keys = await call(gateway, "GET", "/v1/admin/keys", "admin")
    assert all("\x00" not in key["name"] for key in keys["items"])
