"""The query channel over HTTP: submit, long-poll lease, result, read back."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.conftest import Gateway

pytestmark = pytest.mark.both_engines  # the behavioural suite: SQLite and PostgreSQL


async def submit(gw: Gateway, who: str = "t1", **body: object) -> dict[str, Any]:
    body = {"site": "shop", "kind": "balance", "params": {"account": "a1"}, **body}
    status, reply = await gw.call("POST", "/v1/queries", who, json=body)
    assert status in (200, 201), reply
    submitted: dict[str, Any] = reply
    return submitted


async def test_query_round_trip(gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    submitted = await submit(gateway, query_id="q1")
    assert submitted == {"query_id": "q1", "status": "queued", "created": True}

    status, leased = await gateway.call("POST", "/v1/queries/lease", "worker",
                                        json={"worker_id": "w1", "wait_seconds": 0})
    assert status == 200
    [lease] = leased["items"]
    assert lease["query_id"] == "q1" and lease["attempt"] == 1
    assert lease["lease_expires_at"] == "2026-11-30T08:01:00Z"

    status, done = await gateway.call(
        "POST", "/v1/queries/q1/result", "worker",
        json={"worker_id": "w1", "lease_token": lease["lease_token"], "outcome": "succeeded",
              "result": {"balance": 12}})
    assert status == 200 and done["status"] == "succeeded"
    status, got = await gateway.call("GET", "/v1/queries/q1", "t1")
    assert got["result"] == {"balance": 12} and got["completed_at"] == "2026-11-30T08:00:00Z"


async def test_submit_is_idempotent_and_conflicts_on_other_payload(gateway: Gateway) -> None:
    await submit(gateway, query_id="q1")
    status, again = await gateway.call("POST", "/v1/queries", "t1", json={
        "query_id": "q1", "site": "shop", "kind": "balance", "params": {"account": "a1"}})
    assert (status, again["created"]) == (200, False)
    status, conflict = await gateway.call("POST", "/v1/queries", "t1", json={
        "query_id": "q1", "site": "shop", "kind": "balance", "params": {"account": "OTHER"}})
    assert status == 409 and conflict["error"]["code"] == 6004


async def test_generated_ids_are_distinct(gateway: Gateway) -> None:
    ids = {(await submit(gateway))["query_id"] for _ in range(50)}
    assert len(ids) == 50


async def test_long_poll_is_answered_by_a_submit(gateway: Gateway,
                                                 autojump_clock: trio.testing.MockClock) -> None:
    got: list[tuple[float, dict[str, Any]]] = []

    async def worker() -> None:
        _, reply = await gateway.call("POST", "/v1/queries/lease", "worker",
                                      json={"worker_id": "w1", "wait_seconds": 30})
        got.append((trio.current_time(), reply))

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        await trio.sleep(7)
        await submit(gateway, query_id="late")
    when, reply = got[0]
    assert when - start == 7
    assert [item["query_id"] for item in reply["items"]] == ["late"]


async def test_long_poll_times_out_with_empty_list(gateway: Gateway,
                                                   autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    status, reply = await gateway.call("POST", "/v1/queries/lease", "worker",
                                       json={"worker_id": "w1", "wait_seconds": 12})
    assert (status, reply, trio.current_time() - start) == (200, {"items": []}, 12)


async def test_get_with_wait_returns_when_terminal(gateway: Gateway,
                                                   autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, query_id="q1")
    _, leased = await gateway.call("POST", "/v1/queries/lease", "worker",
                                   json={"worker_id": "w1", "wait_seconds": 0})
    token = leased["items"][0]["lease_token"]
    seen: list[tuple[float, dict[str, Any]]] = []

    async def upstream() -> None:
        _, body = await gateway.call("GET", "/v1/queries/q1?wait_seconds=30", "t1")
        seen.append((trio.current_time(), body))

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(upstream)
        await trio.sleep(4)
        await gateway.call("POST", "/v1/queries/q1/result", "worker", json={
            "worker_id": "w1", "lease_token": token, "outcome": "failed",
            "error": {"code": 7, "message": "site down", "retryable": False}})
    when, body = seen[0]
    assert when - start == 4
    assert body["status"] == "failed" and body["error"] == {"code": 7, "message": "site down",
                                                             "type": None, "traceback": None}


async def test_result_fencing(gateway: Gateway) -> None:
    await submit(gateway, query_id="q1")
    _, leased = await gateway.call("POST", "/v1/queries/lease", "worker",
                                   json={"worker_id": "w1", "wait_seconds": 0})
    token = leased["items"][0]["lease_token"]
    body = {"worker_id": "w1", "lease_token": token, "outcome": "succeeded", "result": {"x": 1}}
    status, wrong = await gateway.call("POST", "/v1/queries/q1/result", "worker",
                                       json={**body, "worker_id": "w2"})
    assert status == 409 and wrong["error"]["type"] == "query_lease_invalid"
    status, _ = await gateway.call("POST", "/v1/queries/q1/result", "worker",
                                   json={**body, "lease_token": "stale-token"})
    assert status == 409
    assert (await gateway.call("POST", "/v1/queries/q1/result", "worker", json=body))[0] == 200
    # An identical retry after a lost response: 200 with the current state.
    status, again = await gateway.call("POST", "/v1/queries/q1/result", "worker", json=body)
    assert status == 200 and again["status"] == "succeeded"
    # Another outcome for a finished query: 6006.
    status, other = await gateway.call("POST", "/v1/queries/q1/result", "worker",
                                       json={**body, "outcome": "failed"})
    assert status == 409 and other["error"]["code"] == 6006
    status, missing = await gateway.call("POST", "/v1/queries/nope/result", "worker", json=body)
    assert status == 404 and missing["error"]["code"] == 6005


async def test_tenants_see_only_their_own(gateway: Gateway) -> None:
    await submit(gateway, "t1", query_id="mine")
    await submit(gateway, "t2", query_id="theirs")
    status, body = await gateway.call("GET", "/v1/queries/theirs", "t1")
    assert status == 404 and body["error"]["code"] == 6005
    _, listed = await gateway.call("GET", "/v1/queries", "t1")
    assert [q["query_id"] for q in listed["items"]] == ["mine"] and listed["total"] == 1
    _, everything = await gateway.call("GET", "/v1/queries?limit=1", "admin")
    assert everything["total"] == 2 and len(everything["items"]) == 1
    assert everything["items"][0]["query_id"] == "theirs"  # newest first


async def test_worker_sites_filter_and_key_sites(gateway: Gateway) -> None:
    from leasegate.actors.keys.records import CreateKey

    await submit(gateway, query_id="a", site="shop-a")
    await submit(gateway, query_id="b", site="shop-b")
    created = await gateway.system.keys.ask(
        CreateKey("worker", "b-only", None, ("shop-b",)))
    gateway.keys["b-only"] = created.key
    status, body = await gateway.call("POST", "/v1/queries/lease", "b-only", json={
        "worker_id": "w", "wait_seconds": 0, "sites": ["shop-a"]})
    assert status == 403 and body["error"]["code"] == 4030
    _, leased = await gateway.call("POST", "/v1/queries/lease", "b-only", json={
        "worker_id": "w", "wait_seconds": 0, "max": 10})
    assert [i["query_id"] for i in leased["items"]] == ["b"]
    _, leased = await gateway.call("POST", "/v1/queries/lease", "worker", json={
        "worker_id": "w", "wait_seconds": 0, "sites": ["shop-a"]})
    assert [i["query_id"] for i in leased["items"]] == ["a"]


async def test_a_site_limited_key_may_not_report_another_sites_query(gateway: Gateway) -> None:
    from leasegate.actors.keys.records import CreateKey

    await submit(gateway, query_id="a", site="shop-a")
    _, leased = await gateway.call("POST", "/v1/queries/lease", "worker",
                                   json={"worker_id": "w", "wait_seconds": 0})
    token = leased["items"][0]["lease_token"]
    created = await gateway.system.keys.ask(
        CreateKey("worker", "b-only", None, ("shop-b",)))
    gateway.keys["b-only"] = created.key
    status, body = await gateway.call("POST", "/v1/queries/a/result", "b-only", json={
        "worker_id": "w", "lease_token": token, "outcome": "succeeded"})
    assert status == 403 and body["error"]["code"] == 4030
    _, row = await gateway.call("GET", "/v1/queries/a", "admin")
    assert row["status"] == "leased"  # nothing changed
