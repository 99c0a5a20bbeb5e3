"""Batches applied set-based, on SQLite and PostgreSQL: a batch of submits is one
insert of its new jobs (and one of their history), a lease of many one update, and
still every item is answered on its own, exactly as it would be alone.

Each failing item (bad input, 6004 against a live job or a tombstone, a hold short of
funds) gets its own error while the others are created and committed (read back on a
connection of its own); a lease of many hands each job out once, each with a token of
its own that fences that job alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leasegate.storage.engine import Connection
from tests.conftest import EPOCH, Gateway, open_db
from tests.test_batch_http import QUERY, batch, codes, lease_queries, statuses
from tests.test_http_tasks import ORDER, call, fence, lease, submit
from tests.test_ledger import credit

pytestmark = pytest.mark.both_engines

Json = dict[str, Any]


def read(tmp_path: Path, database_url: str | None, sql: str) -> list[tuple[Any, ...]]:
    """Rows read on a database connection of the test's own: what was committed."""
    db = open_db(tmp_path / "leasegate.db", database_url=database_url)
    try:
        return db.run_sync(lambda conn: [tuple(row) for row in conn.execute(sql)])
    finally:
        db.close()


def tombstone(tmp_path: Path, database_url: str | None, table: str, column: str,
              job_id: str) -> None:
    """A purged job's tombstone (another payload's fingerprint), laid directly."""
    def lay(conn: Connection) -> None:
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {table} ({column}, tenant, fingerprint, status, "
                     "purged_at) VALUES (?, 'ten1', 'other', 'succeeded', ?)",
                     (job_id, EPOCH))
        conn.execute("COMMIT")

    db = open_db(tmp_path / "leasegate.db", database_url=database_url)
    try:
        db.run_sync(lay)
    finally:
        db.close()


async def test_a_mixed_task_batch_answers_each_item_and_commits_the_good_ones(
        gateway: Gateway, tmp_path: Path, database_url: str | None) -> None:
    await credit(gateway, "t1", 100, "pay-1")
    await submit(gateway, task_id="taken", account="x")
    tombstone(tmp_path, database_url, "task_tombstones", "task_id", "purged")
    items = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "task_id": "a", "account": "a"},
        {**ORDER, "task_id": "b", "site": "not a site"},                  # 400
        {**ORDER, "task_id": "taken", "account": "x", "params": {"o": 1}},  # 6004: live
        {**ORDER, "task_id": "taken", "account": "x"},                    # 200: a replay
        {**ORDER, "task_id": "purged"},                                   # 6004: tombstone
        {**ORDER, "task_id": "dear", "account": "d", "max_cost": 500},    # 402: short
        {**ORDER, "task_id": "held", "account": "h", "max_cost": 40},     # 201, held
        {**ORDER, "account": "g", "not_before": "2099-01-01T00:00:00Z"},  # 201, generated
    ]})
    assert statuses(items) == [201, 400, 409, 200, 409, 402, 201, 201]
    assert codes(items) == [None, 4000, 6004, None, 6004, 6007, None, None]
    assert items[3]["task"] == {"task_id": "taken", "status": "queued", "created": False}
    generated = items[7]["task"]["task_id"]
    assert generated.startswith("t-")
    created = ["a", "held", generated]
    committed = read(tmp_path, database_url,
                     "SELECT task_id, status, max_cost FROM tasks ORDER BY task_id")
    assert sorted(committed) == sorted([("a", "queued", None), ("held", "queued", 40),
                                        (generated, "queued", None),
                                        ("taken", "queued", None)])
    events = read(tmp_path, database_url,
                  "SELECT job_id, kind, status FROM job_events WHERE channel = 'task' "
                  "ORDER BY event_id")
    # One 'submitted' each, in the batch's order, after the earlier submit's.
    assert events == [("taken", "submitted", "queued")] + [
        (task_id, "submitted", "queued") for task_id in created]
    status, held = await call(gateway, "GET", "/v1/tasks/held", "t1")
    assert status == 200
    assert (held["billing"]["max_cost"], held["billing"]["hold_status"]) == (40, "open")
    # Only the not_before-free ones are leasable now, each once.
    leased = await lease(gateway, max=100)
    assert sorted(item["task_id"] for item in leased) == ["a", "held", "taken"]


async def test_a_mixed_query_batch_answers_each_item_and_commits_the_good_ones(
        gateway: Gateway, tmp_path: Path, database_url: str | None) -> None:
    tombstone(tmp_path, database_url, "query_tombstones", "query_id", "gone")
    items = await batch(gateway, "/v1/queries/batch", "t1", {"items": [
        {**QUERY, "query_id": "q1"},
        {**QUERY, "query_id": "gone"},                        # 6004: tombstone
        {**QUERY, "query_id": "q2", "kind": "not a kind"},    # 400
        {**QUERY, "query_id": "q1"},                          # an id twice: a replay
        {**QUERY, "query_id": "q1", "params": {"o": 1}},      # and 6004
        {**QUERY, "max_cost": 5},                             # 402: no funds at all
        QUERY,                                                # 201, generated
    ]})
    assert statuses(items) == [201, 409, 400, 200, 409, 402, 201]
    assert codes(items) == [None, 6004, 4000, None, 6004, 6007, None]
    generated = items[6]["query"]["query_id"]
    committed = read(tmp_path, database_url, "SELECT query_id FROM queries")
    assert sorted(committed) == sorted([("q1",), (generated,)])
    events = read(tmp_path, database_url,
                  "SELECT job_id FROM job_events WHERE channel = 'query' ORDER BY event_id")
    assert events == [("q1",), (generated,)]


async def test_a_lease_of_many_hands_each_job_out_once_with_its_own_token(
        gateway: Gateway, tmp_path: Path, database_url: str | None) -> None:
    tasks = await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "task_id": f"t{n}", "account": f"a{n % 60}"} for n in range(100)]})
    queries = await batch(gateway, "/v1/queries/batch", "t1", {"items": [
        {**QUERY, "query_id": f"q{n}"} for n in range(100)]})
    assert set(statuses(tasks)) == set(statuses(queries)) == {201}
    # Tasks: one per lane, 60 lanes; each job once, every token distinct.
    leased = await lease(gateway, "w1", max=100, request_id="r1")
    assert len(leased) == 60
    assert len({item["task_id"] for item in leased}) == 60
    assert len({item["lease_token"] for item in leased}) == 60
    assert {item["account"] for item in leased} == {f"a{n}" for n in range(60)}
    again = await lease(gateway, "w1", max=100, request_id="r1")  # a lost reply's retry
    assert sorted((i["task_id"], i["lease_token"]) for i in again) == sorted(
        (i["task_id"], i["lease_token"]) for i in leased)
    query_leases = await lease_queries(gateway, "w2", max=100)
    assert sorted(item["query_id"] for item in query_leases) == sorted(
        f"q{n}" for n in range(100))
    assert len({item["lease_token"] for item in query_leases}) == 100
    assert await lease_queries(gateway, "w3", max=100) == []
    committed = read(tmp_path, database_url,
                     "SELECT job_id, count(*) FROM job_events WHERE kind = 'leased' "
                     "GROUP BY job_id")
    assert len(committed) == 160 and {count for _, count in committed} == {1}
    # Each token fences its own job alone: another job's token is refused.
    first, second = leased[0], leased[1]
    status, reply = await call(gateway, "POST", f"/v1/tasks/{first['task_id']}/start",
                               "worker", fence({**second, "task_id": first["task_id"]}))
    assert status == 409, reply
    status, reply = await call(gateway, "POST", f"/v1/tasks/{first['task_id']}/start",
                               "worker", fence(first))
    assert status == 200, reply
    q = query_leases[0]
    status, reply = await call(gateway, "POST", f"/v1/queries/{q['query_id']}/result",
                               "worker", {"worker_id": "w2",
                                          "lease_token": query_leases[1]["lease_token"],
                                          "outcome": "succeeded", "result": {}})
    assert status == 409, reply
