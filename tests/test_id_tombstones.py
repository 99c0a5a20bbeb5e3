"""A job id is never run twice across retention, on both channels.

A purged task or query leaves a tombstone (tenant, id, fingerprint, final
status): a resubmit of its id days later is a replay (200, ``created: false``,
the final status) or 6004, never a new job; another tenant gets the live-id
answer. Tombstones go after ``id_tombstone_retention`` and the id is free again.

Short retentions here (1 h for jobs, 1 d for tombstones, purges every 10 min)
so the autojump clock covers them in a few hundred turns.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.clock import Clock
from leasegate.settings import DAY, HOUR, Settings
from tests.conftest import Gateway, start_gateway
from tests.test_http_tasks import (
    ORDER,
    assert_error,
    call,
    control,
    finish,
    lease,
    lease_one,
    start,
    submit,
)

Json = dict[str, Any]
PURGE_EVERY = 600.0
SHORT = {"task_retention": HOUR, "query_retention": HOUR, "id_tombstone_retention": DAY,
         "housekeeping_interval": PURGE_EVERY}
TOMBSTONE_COLUMNS = ["tenant", "fingerprint", "status", "purged_at"]
BALANCE: Json = {"site": "shop", "kind": "balance", "params": {"account": "a1"}}


@pytest.fixture
async def gw(nursery: trio.Nursery, tmp_path: Path, settings: Settings,
             clock: Clock) -> Gateway:
    return await start_gateway(nursery, tmp_path / "leasegate.db", settings.replace(**SHORT),
                               clock)


def read(tmp_path: Path, query: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(tmp_path / "leasegate.db")) as conn:
        return conn.execute(query).fetchall()


def tombstones(tmp_path: Path, channel: str) -> list[tuple[Any, ...]]:
    """A channel's ("task" or "query") tombstones as (id, tenant, status), by id; each
    compact (checked): no params, no result."""
    table = f"{channel}_tombstones"
    columns = [row[1] for row in read(tmp_path, f"PRAGMA table_info({table})")]
    assert columns == [f"{channel}_id", *TOMBSTONE_COLUMNS]
    return read(tmp_path, f"SELECT {channel}_id, tenant, status FROM {table} ORDER BY 1")


async def conflict_message(gw: Gateway, path: str, who: str, body: Json) -> str:
    status, reply = await call(gw, "POST", path, who, body)
    assert_error(status, reply, 409, 6004)
    message: str = reply["error"]["message"]
    return message


# ---- tasks ----------------------------------------------------------------------------------

async def test_a_purged_task_id_is_answered_from_its_tombstone(
        gw: Gateway, tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gw, task_id="order-1")
    item = await lease_one(gw)
    await start(gw, item)
    await finish(gw, item, result={"order_no": "A-17"})
    await submit(gw, task_id="order-2", account="acct-2")
    await control(gw, "order-2", "cancel")
    await trio.sleep(HOUR + 2 * PURGE_EVERY)  # retention, then the purge

    status, gone = await call(gw, "GET", "/v1/tasks/order-1", "t1")
    assert_error(status, gone, 404, 6001)  # the job itself is purged
    for task_id, account, final in (("order-1", "acct-1", "succeeded"),
                                    ("order-2", "acct-2", "canceled")):
        status, again = await call(gw, "POST", "/v1/tasks", "t1",
                                   {**ORDER, "task_id": task_id, "account": account})
        assert (status, again) == (200, {"task_id": task_id, "status": final,
                                         "created": False})
    assert await lease(gw) == []  # nothing to run again
    _, listed = await call(gw, "GET", "/v1/tasks", "admin")
    assert listed["total"] == 0

    # Another payload is 6004; another tenant gets what a live id of another tenant gets.
    await conflict_message(gw, "/v1/tasks", "t1",
                           {**ORDER, "task_id": "order-1", "params": {"sku": "X1", "qty": 3}})
    await submit(gw, "t1", task_id="live-1", account="acct-3")
    live = await conflict_message(gw, "/v1/tasks", "t2",
                                  {**ORDER, "task_id": "live-1", "account": "acct-3"})
    purged = await conflict_message(gw, "/v1/tasks", "t2", {**ORDER, "task_id": "order-1"})
    assert purged == live.replace("live-1", "order-1")

    assert tombstones(tmp_path, "task") == [("order-1", "t1", "succeeded"),
                                            ("order-2", "t1", "canceled")]


async def test_a_task_id_is_free_again_after_its_tombstone_retention(
        gw: Gateway, tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gw, task_id="order-1")
    await control(gw, "order-1", "cancel")
    await trio.sleep(HOUR + PURGE_EVERY)  # purged (and buried) at some run after 1 h
    status, again = await call(gw, "POST", "/v1/tasks", "t1", {**ORDER, "task_id": "order-1"})
    assert (status, again["created"]) == (200, False)
    await trio.sleep(DAY - PURGE_EVERY - 1)  # not yet: the tombstone counts from the purge
    assert read(tmp_path, "SELECT count(*) FROM task_tombstones") == [(1,)]
    await trio.sleep(2 * PURGE_EVERY + 1)
    assert read(tmp_path, "SELECT count(*) FROM task_tombstones") == [(0,)]
    created = await submit(gw, "t2", task_id="order-1")  # anyone's now
    assert created == {"task_id": "order-1", "status": "queued", "created": True}
    assert (await lease_one(gw))["task_id"] == "order-1"


# ---- queries --------------------------------------------------------------------------------

async def test_a_purged_query_id_is_answered_from_its_tombstone(
        gw: Gateway, tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    status, _ = await call(gw, "POST", "/v1/queries", "t1", {**BALANCE, "query_id": "q1"})
    assert status == 201
    status, leased = await call(gw, "POST", "/v1/queries/lease", "worker",
                                {"worker_id": "w1", "wait_seconds": 0})
    [got] = leased["items"]
    status, done = await call(gw, "POST", "/v1/queries/q1/result", "worker",
                              {"worker_id": "w1", "lease_token": got["lease_token"],
                               "outcome": "succeeded", "result": {"balance": 12}})
    assert (status, done["status"]) == (200, "succeeded")
    status, _ = await call(gw, "POST", "/v1/queries", "t1",
                           {**BALANCE, "query_id": "q2", "params": {"account": "a2"}})
    assert status == 201  # never leased: expired after query_ttl
    await trio.sleep(HOUR + 2 * PURGE_EVERY + 600)

    status, gone = await call(gw, "GET", "/v1/queries/q1", "t1")
    assert status == 404, gone
    for query_id, account, final in (("q1", "a1", "succeeded"), ("q2", "a2", "expired")):
        status, again = await call(gw, "POST", "/v1/queries", "t1",
                                   {**BALANCE, "query_id": query_id,
                                    "params": {"account": account}})
        assert (status, again) == (200, {"query_id": query_id, "status": final,
                                         "created": False})
    status, leased = await call(gw, "POST", "/v1/queries/lease", "worker",
                                {"worker_id": "w1", "wait_seconds": 0})
    assert (status, leased) == (200, {"items": []})

    await conflict_message(gw, "/v1/queries", "t1",
                           {**BALANCE, "query_id": "q1", "params": {"account": "OTHER"}})
    status, _ = await call(gw, "POST", "/v1/queries", "t1", {**BALANCE, "query_id": "live-q"})
    live = await conflict_message(gw, "/v1/queries", "t2", {**BALANCE, "query_id": "live-q"})
    purged = await conflict_message(gw, "/v1/queries", "t2", {**BALANCE, "query_id": "q1"})
    assert purged == live.replace("live-q", "q1")

    assert tombstones(tmp_path, "query") == [("q1", "t1", "succeeded"), ("q2", "t1", "expired")]

    await trio.sleep(DAY + 2 * PURGE_EVERY)  # the tombstones go; the ids are free again
    assert read(tmp_path, "SELECT query_id FROM query_tombstones "
                          "WHERE query_id IN ('q1', 'q2')") == []
    status, fresh = await call(gw, "POST", "/v1/queries", "t2", {**BALANCE, "query_id": "q1"})
    assert (status, fresh["created"]) == (201, True)
