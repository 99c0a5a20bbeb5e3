"""Batch endpoints over HTTP: each item answered on its own, as it would be alone.

Submits (tasks and queries), starts and results, 1..100 items a call; the reply
is always 200 with one entry per item, in order: the item's own status and
object, or its status and error envelope.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.conftest import Gateway
from tests.test_http_tasks import ORDER, assert_error, call, fence, lease, submit
from tests.test_ledger import account, credit

Json = dict[str, Any]
QUERY: Json = {"site": "shop", "kind": "balance", "params": {"account": "alice"}}


async def batch(gw: Gateway, path: str, who: str, body: Json) -> list[Json]:
    status, reply = await call(gw, "POST", path, who, body)
    assert status == 200, reply
    assert set(reply) == {"items"}
    items: list[Json] = reply["items"]
    return items


def statuses(items: list[Json]) -> list[int]:
    return [item["status"] for item in items]


def codes(items: list[Json]) -> list[int | None]:
    return [item["error"]["code"] if "error" in item else None for item in items]


async def lease_queries(gw: Gateway, worker_id: str = "w1", **fields: Any) -> list[Json]:
    status, reply = await call(gw, "POST", "/v1/queries/lease", "worker",
                               {"worker_id": worker_id, "wait_seconds": 0, **fields})
    assert status == 200, reply
    items: list[Json] = reply["items"]
    return items


# ---- submits -------------------------------------------------------------------------

async def test_a_bad_item_fails_alone_and_the_good_ones_are_created(gateway: Gateway) -> None:
    await submit(gateway, task_id="taken")
    items = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "task_id": "a", "account": "a"},
        {**ORDER, "task_id": "b", "site": "not a site"},             # 400: the field's rule
        {**ORDER, "task_id": "taken", "params": {"other": True}},    # 409: another payload
        {**ORDER, "task_id": "c", "account": "c", "unknown": 1},     # 400: unknown field
        {**ORDER, "task_id": "d", "params": {"x": "y" * 70_000}},    # 413: params too large
        {**ORDER, "account": "e"},                                   # 201, a generated id
    ]})
    assert statuses(items) == [201, 400, 409, 400, 413, 201]
    assert codes(items) == [None, 4000, 6004, 4000, 4130, None]
    assert items[0]["task"] == {"task_id": "a", "status": "queued", "created": True}
    assert "site" in items[1]["error"]["message"]
    assert set(items[2]["error"]) == {"code", "type", "message"}
    assert items[5]["task"]["task_id"].startswith("t-")
    for task_id, want in (("a", 200), ("b", 404), ("c", 404), ("d", 404)):
        status, _ = await call(gateway, "GET", f"/v1/tasks/{task_id}", "t1")
        assert status == want, task_id
    leased = await lease(gateway, max=100)
    assert sorted(i["task_id"] for i in leased) == sorted(["taken", "a",
                                                           items[5]["task"]["task_id"]])


@pytest.mark.parametrize(("path", "who", "body"), [
    ("/v1/tasks/batch", "t1", {"items": [ORDER, "not an object"]}),
    ("/v1/queries/batch", "t1", {"items": [[QUERY]]}),
    ("/v1/tasks/start", "worker", {"worker_id": "w1", "items": [7]}),
    ("/v1/tasks/results", "worker", {"worker_id": "w1", "items": [None]}),
    ("/v1/queries/results", "worker", {"worker_id": "w1", "items": [True]}),
])
async def test_an_item_that_is_no_object_is_the_whole_calls_400(
        gateway: Gateway, path: str, who: str, body: Json) -> None:
    # The document says items are objects: anything else is refused whole, as the
    # document says, and nothing of the call is done.
    status, reply = await call(gateway, "POST", path, who, body)
    assert_error(status, reply, 400, 4000)
    assert "each item must be a JSON object" in reply["error"]["message"]
    status, listed = await call(gateway, "GET", "/v1/tasks", "t1")
    assert listed["total"] == 0


async def test_replays_inside_one_batch_and_across_batches(gateway: Gateway) -> None:
    one = {**ORDER, "task_id": "same"}
    items = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        one, one, {**one, "params": {"changed": 1}}]})
    # The second is a replay of the first (200); the third's other payload is 6004.
    assert statuses(items) == [201, 200, 409]
    assert items[1]["task"] == {"task_id": "same", "status": "queued", "created": False}
    again = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [one]})
    assert again == [{"status": 200, "task": {"task_id": "same", "status": "queued",
                                              "created": False}}]
    status, single = await call(gateway, "POST", "/v1/tasks", "t1", one)
    assert (status, single["created"]) == (200, False)
    assert len(await lease(gateway, max=100)) == 1  # one task, however often submitted


async def test_query_batches_answer_each_item(gateway: Gateway) -> None:
    items = await batch(gateway, "/v1/queries/batch", "t1", {"items": [
        {**QUERY, "query_id": "q1"}, {**QUERY, "query_id": "q1"},
        {**QUERY, "kind": ""}, {**QUERY, "query_id": "q1", "params": {}}]})
    assert statuses(items) == [201, 200, 400, 409]
    assert items[0]["query"] == {"query_id": "q1", "status": "queued", "created": True}
    across = await batch(gateway, "/v1/queries/batch", "t1", {"items": [{**QUERY,
                                                                         "query_id": "q1"}]})
    assert statuses(across) == [200]
    assert [q["query_id"] for q in await lease_queries(gateway, max=100)] == ["q1"]


async def test_limits_are_the_whole_calls_400(gateway: Gateway) -> None:
    many = [{**ORDER, "account": f"a{n}"} for n in range(101)]
    for path, who, body in (
        ("/v1/tasks/batch", "t1", {"items": many}),
        ("/v1/tasks/batch", "t1", {"items": []}),
        ("/v1/tasks/batch", "t1", {"items": {"not": "a list"}}),
        ("/v1/tasks/batch", "t1", {}),
        ("/v1/queries/batch", "t1", {"items": [QUERY] * 101}),
        ("/v1/queries/batch", "t1", {"items": []}),
        ("/v1/tasks/start", "worker", {"worker_id": "w1", "items": []}),
        ("/v1/tasks/results", "worker", {"worker_id": "w1", "items": [{}] * 101}),
        ("/v1/queries/results", "worker", {"worker_id": "w1", "items": []}),
    ):
        status, reply = await call(gateway, "POST", path, who, body)
        assert status == 400, (path, reply)
        assert reply["error"]["code"] == 4000
    assert await lease(gateway, max=100) == []  # nothing of the 101 was taken
    hundred = await batch(gateway, "/v1/tasks/batch", "t1", {"items": many[:100]})
    assert statuses(hundred) == [201] * 100
    assert len(await lease(gateway, max=100)) == 100  # 100 lanes in one lease


async def test_roles_are_the_single_routes(gateway: Gateway) -> None:
    for path, who in (("/v1/tasks/batch", "worker"), ("/v1/tasks/batch", "admin"),
                      ("/v1/queries/batch", "worker"), ("/v1/tasks/start", "t1"),
                      ("/v1/tasks/results", "t1"), ("/v1/queries/results", "t1")):
        status, _ = await call(gateway, "POST", path, who,
                               {"items": [ORDER]} if path.endswith("batch") else
                               {"worker_id": "w1", "items": [{}]})
        assert status == 403, path


async def test_billing_per_item_one_short_of_funds_alone_is_402(gateway: Gateway) -> None:
    await credit(gateway, "t1", 100, "pay-1")
    items = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "task_id": "cheap", "account": "a", "max_cost": 30},
        {**ORDER, "task_id": "dear", "account": "b", "max_cost": 500},   # 402: short
        {**ORDER, "task_id": "free", "account": "c"},
        {**ORDER, "task_id": "cheap", "account": "a", "max_cost": 30},   # a replay
        {**ORDER, "task_id": "also", "account": "d", "max_cost": 60},
        {**ORDER, "task_id": "bad", "account": "e", "max_cost": 10, "priority": 99},  # 400
    ]})
    assert statuses(items) == [201, 402, 201, 200, 201, 400]
    assert codes(items)[1] == 6007
    balance = await account(gateway)
    assert (balance["balance"], balance["held"]) == (100, 90)  # 30 + 60, nothing else
    status, _ = await call(gateway, "GET", "/v1/tasks/dear", "t1")
    assert status == 404
    queries = await batch(gateway, "/v1/queries/batch", "t1", {"items": [
        {**QUERY, "query_id": "qa", "max_cost": 10}, {**QUERY, "query_id": "qb",
                                                       "max_cost": 11}]})
    assert statuses(queries) == [201, 402]
    assert (await account(gateway))["held"] == 100


async def test_holds_are_placed_in_request_order(gateway: Gateway, autojump_clock: Any) -> None:
    await credit(gateway, "t1", 100, "pay-1")
    for _ in range(3):  # the first item wins the money, every time
        items = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
            {**ORDER, "account": f"a{n}", "max_cost": 60} for n in range(2)]})
        assert statuses(items) == [201, 402]
        done = items[0]["task"]["task_id"]
        status, _ = await call(gateway, "POST", f"/v1/tasks/{done}/cancel", "t1")
        assert status == 200  # canceled: its hold is refunded
        await trio.sleep(0.1)  # the settle reaches the ledger after the task's commit


async def test_a_refused_enqueue_gives_its_hold_back(gateway: Gateway) -> None:
    await credit(gateway, "t1", 100, "pay-1")
    await submit(gateway, task_id="taken")
    items = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "task_id": "taken", "max_cost": 40},     # held, then 6004: released
        {**ORDER, "task_id": "fine", "account": "f", "max_cost": 40}]})
    assert statuses(items) == [409, 201]
    assert (await account(gateway))["held"] == 40


async def actor_commits(gw: Gateway, actor: str) -> float:
    response = await gw.client.get("/metrics", headers=gw.auth("admin"))
    text = (await response.get_data()).decode()
    found = re.search(rf'^leasegate_actor_commits_total{{actor="{actor}"}} (\S+)$', text, re.M)
    assert found, text
    return float(found.group(1))


async def test_the_holds_of_one_batch_are_one_commit_of_the_ledger(gateway: Gateway) -> None:
    """A crash leaves all of a batch's holds or none (it left 1 of 100 in a kill -9)."""
    await credit(gateway, "t1", 10_000, "pay-1")
    for path, body in (("/v1/tasks/batch", ORDER), ("/v1/queries/batch", QUERY)):
        before = await actor_commits(gateway, "ledger")
        items = await batch(gateway, path, "t1", {"items": [
            {**body, "max_cost": 1 + n % 3} for n in range(100)]})
        assert statuses(items) == [201] * 100
        assert await actor_commits(gateway, "ledger") == before + 1
    status, holds = await call(gateway, "GET", "/v1/ledger/holds?status=open&limit=500",
                               "admin")
    assert (status, holds["total"]) == (200, 200)


async def test_a_batch_whose_enqueue_fails_leaves_no_holds(
        gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    await credit(gateway, "t1", 100, "pay-1")

    async def full(fn: Callable[[sqlite3.Connection], Any]) -> Any:
        await trio.lowlevel.checkpoint()
        exc = sqlite3.OperationalError("database or disk is full")
        exc.sqlite_errorcode = sqlite3.SQLITE_FULL
        raise exc

    monkeypatch.setattr(gateway.system.task_actor.db, "run", full)
    status, body = await call(gateway, "POST", "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "account": f"a{n}", "max_cost": 10} for n in range(5)]})
    assert (status, body["error"]["code"]) == (503, 5030)
    monkeypatch.undo()
    assert (await account(gateway))["available"] == 100
    assert (await account(gateway))["held"] == 0
    status, holds = await call(gateway, "GET", "/v1/ledger/holds?status=open", "admin")
    assert holds["items"] == []


# ---- starts and results --------------------------------------------------------------

async def test_starts_are_fenced_per_item_and_the_lane_rule_holds(gateway: Gateway) -> None:
    for task_id, lane in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")):
        await submit(gateway, task_id=task_id, account=lane)
    leased = {i["task_id"]: i for i in await lease(gateway, max=100)}
    assert sorted(leased) == ["a1", "b1", "c1"]  # one per lane, a2 waits behind a1
    items = await batch(gateway, "/v1/tasks/start", "worker", {"worker_id": "w1", "items": [
        {"task_id": "a1", "lease_token": leased["a1"]["lease_token"]},
        {"task_id": "a2", "lease_token": leased["a1"]["lease_token"]},  # never leased
        {"task_id": "b1", "lease_token": "stale-token"},
        {"task_id": "c1", "lease_token": leased["c1"]["lease_token"]},
        {"task_id": "nope", "lease_token": "x"},
        {"task_id": "a1", "lease_token": leased["a1"]["lease_token"]},  # a retry: same state
        {"task_id": "bad id!", "lease_token": "x"},
    ]})
    assert statuses(items) == [200, 409, 409, 200, 404, 200, 400]
    assert codes(items) == [None, 6002, 6002, None, 6001, None, 4000]
    assert items[0]["task"]["status"] == "running"
    assert items[0]["task"]["task_id"] == "a1"
    # Lane a holds one task in flight; a2 is still queued and not leasable.
    _, a2 = await call(gateway, "GET", "/v1/tasks/a2", "t1")
    assert a2["status"] == "queued"
    assert await lease(gateway, "w2", max=100) == []
    # b1's claim is untouched by its refused start: its own token still starts it.
    again = await batch(gateway, "/v1/tasks/start", "worker", {"worker_id": "w1", "items": [
        {"task_id": "b1", "lease_token": leased["b1"]["lease_token"]}]})
    assert statuses(again) == [200]


async def test_task_results_are_fenced_per_item(gateway: Gateway) -> None:
    await credit(gateway, "t1", 100, "pay-1")
    for task_id, lane in (("a", "a"), ("b", "b"), ("c", "c")):
        await submit(gateway, task_id=task_id, account=lane, max_cost=20)
    leased = {i["task_id"]: i for i in await lease(gateway, max=100)}
    await batch(gateway, "/v1/tasks/start", "worker", {"worker_id": "w1", "items": [
        {"task_id": t, "lease_token": leased[t]["lease_token"]} for t in leased]})
    body = {"worker_id": "w1", "items": [
        {"task_id": "a", "lease_token": leased["a"]["lease_token"], "outcome": "succeeded",
         "result": {"order": 1}, "cost": 5},
        {"task_id": "b", "lease_token": "stale", "outcome": "succeeded"},
        {"task_id": "c", "lease_token": leased["c"]["lease_token"], "outcome": "failed",
         "error": {"code": 7, "message": "out of stock"}},
        {"task_id": "c", "lease_token": leased["c"]["lease_token"], "outcome": "paused"},
    ]}
    items = await batch(gateway, "/v1/tasks/results", "worker", body)
    assert statuses(items) == [200, 409, 200, 409]  # c: not a batch task, and done already
    assert codes(items) == [None, 6002, None, 6003]
    assert items[0]["task"]["status"] == "succeeded"
    assert items[0]["task"]["billing"]["charged"] == 5
    assert items[2]["task"]["error"] == {"code": 7, "message": "out of stock",
                                          "type": None, "traceback": None}
    status, b = await call(gateway, "GET", "/v1/tasks/b", "t1")
    assert b["status"] == "running"  # the stale token changed nothing
    # A retry of the whole batch: the accepted results replay, the others still fail.
    again = await batch(gateway, "/v1/tasks/results", "worker", body)
    assert statuses(again) == [200, 409, 200, 409]
    single = fence(leased["b"], outcome="succeeded")
    status, done = await call(gateway, "POST", "/v1/tasks/b/result", "worker", single)
    assert (status, done["status"]) == (200, "succeeded")


async def test_query_results_are_fenced_per_item(gateway: Gateway) -> None:
    await batch(gateway, "/v1/queries/batch", "t1", {"items": [
        {**QUERY, "query_id": f"q{n}"} for n in range(3)]})
    leased = {q["query_id"]: q for q in await lease_queries(gateway, max=100)}
    assert sorted(leased) == ["q0", "q1", "q2"]
    items = await batch(gateway, "/v1/queries/results", "worker", {"worker_id": "w1", "items": [
        {"query_id": "q0", "lease_token": leased["q0"]["lease_token"], "outcome": "succeeded",
         "result": {"balance": 3}},
        {"query_id": "q1", "lease_token": leased["q0"]["lease_token"], "outcome": "succeeded"},
        {"query_id": "q2", "lease_token": leased["q2"]["lease_token"], "outcome": "failed",
         "error": {"message": "down", "retryable": False}},
        {"query_id": "q9", "lease_token": "x", "outcome": "succeeded"},
        {"query_id": "q1", "lease_token": "x", "outcome": "maybe"},
    ]})
    assert statuses(items) == [200, 409, 200, 404, 400]
    assert codes(items) == [None, 6006, None, 6005, 4000]
    assert items[0]["query"]["result"] == {"balance": 3}
    assert items[2]["query"]["status"] == "failed"
    _, q1 = await call(gateway, "GET", "/v1/queries/q1", "t1")
    assert q1["status"] == "leased"


async def test_the_batch_routes_are_in_the_openapi_document(gateway: Gateway) -> None:
    status, document = await call(gateway, "GET", "/openapi.json")
    assert status == 200
    paths = document["paths"]
    replies = {"/v1/tasks/batch": "TasksSubmitted", "/v1/queries/batch": "QueriesSubmitted",
               "/v1/tasks/start": "TasksStarted", "/v1/tasks/results": "TaskItems",
               "/v1/queries/results": "QueryItems"}
    for path, title in replies.items():
        operation = paths[path]["post"]
        assert operation["requestBody"]["required"] is True
        assert operation["responses"]["200"]["content"]["application/json"]["schema"][
            "title"] == title
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert (body["properties"]["items"]["minItems"],
                body["properties"]["items"]["maxItems"]) == (1, 100)
    schemas = document["components"]["schemas"]
    assert {"TaskSubmittedItem", "QuerySubmittedItem", "StartedItem", "TaskItem",
            "QueryItem"} <= set(schemas)
    assert paths["/v1/tasks/lease"]["post"]["requestBody"]["content"]["application/json"][
        "schema"]["properties"]["max"]["maximum"] == 100


async def test_a_bug_met_by_one_item_fails_it_alone(gateway: Gateway,
                                                    monkeypatch: Any) -> None:
    from leasegate.storage import tasks_sql

    insert_many = tasks_sql.JOBS.insert_many  # the batch's one insert, or an item's

    def buggy(conn: Any, rows: Any) -> int:
        if any(row["task_id"] == "boom" for row in rows):
            raise RuntimeError("a bug")
        return insert_many(conn, rows)

    monkeypatch.setattr(tasks_sql.JOBS, "insert_many", buggy)
    items = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "task_id": "ok1", "account": "a"}, {**ORDER, "task_id": "boom"},
        {**ORDER, "task_id": "ok2", "account": "b"}]})
    assert statuses(items) == [201, 500, 201]
    assert codes(items)[1] == 5000
    # Counted and logged as a bug in a message is (the actor's statistics say so).
    stats = next(a for a in gateway.system.statistics().actors if a.name == "tasks")
    assert stats.internal_errors == 1
    status, _ = await call(gateway, "GET", "/v1/tasks/boom", "t1")
    assert status == 404
