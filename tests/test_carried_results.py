"""One request per lease call for a worker: a lease call carries the outcomes of its
previous jobs (``results``), and a task worker renews all its running tasks in one call.

Each carried result is fenced and answered on its own, in the reply's ``results``,
exactly as the results route answers it; the results and the lease are one commit;
a retry of the call (same ``request_id``, same results) answers the same; a result
sent both ways is a retry of the same result.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import trio

from tests.conftest import Gateway
from tests.test_batch_http import QUERY, actor_commits, batch, codes, statuses
from tests.test_http_tasks import BATCH, call, control, submit

Json = dict[str, Any]


async def lease_call(gw: Gateway, channel: str, body: Json) -> Json:
    status, reply = await call(gw, "POST", f"/v1/{channel}/lease", "worker",
                               {"worker_id": "w1", "wait_seconds": 0, **body})
    assert status == 200, reply
    return reply


async def running(gw: Gateway, lanes: list[str], **fields: Any) -> dict[str, Json]:
    """Tasks named by their lanes, submitted, leased and started by w1."""
    for lane in lanes:
        await submit(gw, task_id=lane, account=lane, **fields)
    leased = {i["task_id"]: i for i in (await lease_call(gw, "tasks", {"max": 100}))["items"]}
    items = await batch(gw, "/v1/tasks/start", "worker", {"worker_id": "w1", "items": [
        {"task_id": t, "lease_token": leased[t]["lease_token"]} for t in lanes]})
    assert statuses(items) == [200] * len(lanes)
    return leased


def outcome(lease: Json, outcome: str = "succeeded", **extra: Any) -> Json:
    return {"task_id": lease["task_id"], "lease_token": lease["lease_token"],
            "outcome": outcome, **extra}


async def test_task_results_on_a_lease_call_mixed_good_and_bad(gateway: Gateway) -> None:
    leased = await running(gateway, ["a", "b", "c"])
    await submit(gateway, task_id="a2", account="a")  # behind a on its lane
    read = await actor_commits(gateway, "tasks")
    before = await actor_commits(gateway, "tasks")
    read = before - read  # what reading /metrics costs the task actor (a turn)
    reply = await lease_call(gateway, "tasks", {"max": 10, "request_id": "r-1", "results": [
        outcome(leased["a"], result={"order": 1}),
        {**outcome(leased["b"]), "lease_token": "stale"},              # a stale token: 409
        outcome(leased["c"], "failed", error={"code": 7, "message": "out of stock"}),
        {"task_id": "nope", "lease_token": "x", "outcome": "succeeded"},  # 404
        {"task_id": "b", "lease_token": "x", "outcome": "maybe"},          # 400
        outcome(leased["c"], "paused"),                                   # 409: done already
    ]})
    assert statuses(reply["results"]) == [200, 409, 200, 404, 400, 409]
    assert codes(reply["results"]) == [None, 6002, None, 6001, 4000, 6003]
    assert reply["results"][0]["task"]["status"] == "succeeded"
    assert reply["results"][0]["task"]["result"] == {"order": 1}
    assert reply["results"][2]["task"]["error"] == {"code": 7, "message": "out of stock",
                                                    "type": None, "traceback": None}
    # The lane a's result freed is leased in the same call, and all of it is one commit.
    assert [i["task_id"] for i in reply["items"]] == ["a2"]
    assert await actor_commits(gateway, "tasks") == before + read + 1
    _, b = await call(gateway, "GET", "/v1/tasks/b", "t1")
    assert b["status"] == "running"  # the stale token changed nothing

    # The same call again (its reply was lost): the same answers, the same lease.
    again = await lease_call(gateway, "tasks", {"max": 10, "request_id": "r-1", "results": [
        outcome(leased["a"], result={"order": 1}),
        {**outcome(leased["b"]), "lease_token": "stale"},
        outcome(leased["c"], "failed", error={"code": 7, "message": "out of stock"}),
        {"task_id": "nope", "lease_token": "x", "outcome": "succeeded"},
        {"task_id": "b", "lease_token": "x", "outcome": "maybe"},
        outcome(leased["c"], "paused"),
    ]})
    assert statuses(again["results"]) == statuses(reply["results"])
    assert again["items"] == reply["items"]
    assert again["results"][0] == reply["results"][0]
    assert again["results"][2] == reply["results"][2]


async def test_a_result_that_arrives_both_ways_is_a_retry(gateway: Gateway) -> None:
    leased = await running(gateway, ["a", "b"])
    # By the result route first, then carried by a lease call: a retry, answered 200.
    first = await call(gateway, "POST", "/v1/tasks/a/result", "worker", {
        "worker_id": "w1", "lease_token": leased["a"]["lease_token"], "outcome": "succeeded",
        "cost": 2})
    assert first[0] == 200
    reply = await lease_call(gateway, "tasks", {"results": [outcome(leased["a"], cost=2)]})
    assert statuses(reply["results"]) == [200]
    assert reply["results"][0]["task"] == first[1]
    # Carried first, then by the results route: the same.
    reply = await lease_call(gateway, "tasks", {"results": [outcome(leased["b"], "failed")]})
    items = await batch(gateway, "/v1/tasks/results", "worker", {
        "worker_id": "w1", "items": [outcome(leased["b"], "failed")]})
    assert items == reply["results"]
    # Another outcome for a finished task is refused, whichever way it comes.
    other = await lease_call(gateway, "tasks", {"results": [outcome(leased["b"])]})
    assert codes(other["results"]) == [6002]


async def test_query_results_on_a_lease_call(gateway: Gateway) -> None:
    await batch(gateway, "/v1/queries/batch", "t1", {"items": [
        {**QUERY, "query_id": f"q{n}"} for n in range(4)]})
    leased = {q["query_id"]: q for q in
              (await lease_call(gateway, "queries", {"max": 2}))["items"]}
    assert sorted(leased) == ["q0", "q1"]
    body = {"max": 5, "request_id": "r-q", "results": [
        {"query_id": "q0", "lease_token": leased["q0"]["lease_token"], "outcome": "succeeded",
         "result": {"balance": 3}},
        {"query_id": "q1", "lease_token": "stale", "outcome": "succeeded"},
    ]}
    reply = await lease_call(gateway, "queries", body)
    assert statuses(reply["results"]) == [200, 409]
    assert codes(reply["results"]) == [None, 6006]
    assert reply["results"][0]["query"]["result"] == {"balance": 3}
    assert sorted(q["query_id"] for q in reply["items"]) == ["q2", "q3"]
    again = await lease_call(gateway, "queries", body)
    assert again == reply
    _, q1 = await call(gateway, "GET", "/v1/queries/q1", "t1")
    assert q1["status"] == "leased"


async def test_results_are_answered_before_a_lease_that_waits(
        gateway: Gateway, autojump_clock: Any) -> None:
    """Nothing to lease: the results are committed at once; the lease waits as a plain
    long-poll and the reply carries both when work comes."""
    await batch(gateway, "/v1/queries/batch", "t1", {"items": [{**QUERY, "query_id": "q0"}]})
    (q0,) = (await lease_call(gateway, "queries", {}))["items"]
    replies: list[Json] = []

    async def poll() -> None:
        replies.append(await lease_call(gateway, "queries", {"wait_seconds": 20, "results": [
            {"query_id": "q0", "lease_token": q0["lease_token"], "outcome": "succeeded"}]}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.sleep(5)
        _, done = await call(gateway, "GET", "/v1/queries/q0", "t1")
        assert done["status"] == "succeeded"  # committed while the lease still waits
        assert replies == []
        await batch(gateway, "/v1/queries/batch", "t1", {"items": [
            {**QUERY, "query_id": "q1"}]})
    (reply,) = replies
    assert [q["query_id"] for q in reply["items"]] == ["q1"]
    assert statuses(reply["results"]) == [200]


async def test_a_lease_call_without_results_answers_as_before(gateway: Gateway) -> None:
    reply = await lease_call(gateway, "tasks", {})
    assert reply == {"items": []}


async def test_renewals_in_one_call_answer_each_tasks_flags(gateway: Gateway) -> None:
    leased = await running(gateway, ["a", "b", "c"], **{k: v for k, v in BATCH.items()
                                                        if k == "batch_total"})
    await control(gateway, "a", "cancel")
    await control(gateway, "b", "pause")
    items = await batch(gateway, "/v1/tasks/renew", "worker", {"worker_id": "w1", "items": [
        {"task_id": "a", "lease_token": leased["a"]["lease_token"]},
        {"task_id": "b", "lease_token": leased["b"]["lease_token"], "progress": {"done": 1}},
        {"task_id": "c", "lease_token": leased["c"]["lease_token"]},
        {"task_id": "c", "lease_token": "stale"},
        {"task_id": "nope", "lease_token": "x"},
        {"task_id": "c", "lease_token": "x", "progress": [1]},
    ]})
    assert statuses(items) == [200, 200, 200, 409, 404, 400]
    assert codes(items) == [None, None, None, 6002, 6001, 4000]
    flags = [(i["task"]["cancel_requested"], i["task"]["pause_requested"]) for i in items[:3]]
    assert flags == [(True, False), (False, True), (False, False)]
    assert all(i["task"]["lease_expires_at"] for i in items[:3])
    _, b = await call(gateway, "GET", "/v1/tasks/b", "t1")
    assert b["progress"] == {"done": 1}


async def test_the_worker_calls_are_in_the_openapi_document(gateway: Gateway) -> None:
    _, document = await call(gateway, "GET", "/openapi.json")
    paths = document["paths"]
    for channel, item in (("tasks", "TaskItem"), ("queries", "QueryItem")):
        operation = paths[f"/v1/{channel}/lease"]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert "results" in body["properties"], body
        schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert item in str(schema) or "results" in str(document["components"]["schemas"])
    renew = paths["/v1/tasks/renew"]["post"]
    assert renew["responses"]["200"]["content"]["application/json"]["schema"][
        "title"] == "TasksRenewed"


def _trace(conn: Any, to: Callable[[str], object] | None) -> None:
    assert isinstance(conn, sqlite3.Connection)  # this module's gateway is SQLite's
    conn.set_trace_callback(to)


async def test_a_batch_takes_a_savepoint_per_item_only_when_one_fails(
        gateway: Gateway) -> None:
    """All items in one savepoint; one that fails undoes them, and the batch is applied
    again item by item: the answers are the same either way."""
    statements: list[str] = []
    db = gateway.system.task_actor.db
    await db.run(lambda conn: _trace(conn, statements.append))
    good = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {"site": "shop", "kind": "k", "account": f"a{n}", "task_id": f"g{n}"}
        for n in range(50)]})
    savepoints = sum(s.startswith("SAVEPOINT") for s in statements)
    statements.clear()
    mixed = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {"site": "shop", "kind": "k", "account": f"a{n}", "task_id": f"m{n}",
         "params": {"n": n}} for n in range(3)] + [
        {"site": "shop", "kind": "k", "task_id": "g0", "params": {"other": 1}}]})  # 409
    retried = sum(s.startswith("SAVEPOINT") for s in statements)
    await db.run(lambda conn: _trace(conn, None))
    assert statuses(good) == [201] * 50
    assert savepoints == 2  # the message's and its items', not 50 more
    assert statuses(mixed) == [201, 201, 201, 409]
    assert retried == 2 + 4  # the batch undone, then one per item
    _, page = await call(gateway, "GET", "/v1/tasks?limit=100", "t1")
    assert page["total"] == 53
