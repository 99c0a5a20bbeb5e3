"""Batches applied set-based, on SQLite and PostgreSQL: a batch of submits is one
insert of its new jobs (and one of their history), a lease of many one update, and
still every item is answered on its own, exactly as it would be alone.

Each failing item (bad input, 6004 against a live job or a tombstone, a hold short of
funds) gets its own error while the others are created and committed (read back on a
connection of its own); a lease of many hands each job out once, each with a token of
its own that fences that job alone.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.actors.runtime.turn import Turn
from leasegate.storage import queries_sql, tasks_sql
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


# ---- results ------------------------------------------------------------------------

def spy_finishes(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[int]:
    """The size of each UPDATE that finishes jobs (a channel's ``finish_many``)."""
    sizes: list[int] = []
    real = module.finish_many

    def spy(conn: Connection, finishes: Any, now: float) -> list[Any]:
        sizes.append(len(finishes))
        done: list[Any] = real(conn, finishes, now)
        return done

    monkeypatch.setattr(module, "finish_many", spy)
    return sizes


def item_by_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batch from now on applied item by item, each in a savepoint of its own (as
    before results were set-based): what the set-based answers must equal."""
    monkeypatch.setattr(Turn, "_all_at_once", lambda turn, items, together: None)


def without(body: Json, key: str) -> Json:
    return {k: v for k, v in body.items() if k != key}


def shape(value: Any, prefix: str) -> Any:
    """``value`` with the group's ``prefix`` taken out of its ids and its instants left
    out: two groups' answers compared."""
    if isinstance(value, dict):
        return {k: shape(v, prefix) for k, v in value.items()
                if not k.endswith("_at") and k != "at"}  # an attempt error's "at" too
    if isinstance(value, list | tuple):
        return [shape(v, prefix) for v in value]
    return value.replace(prefix, "<p>") if isinstance(value, str) else value


async def same_answers_item_by_item(monkeypatch: pytest.MonkeyPatch, together: Any,
                                    calls: Callable[[str], Awaitable[Any]]) -> None:
    """The same ``calls`` made again (ids ``one-...``) with every batch applied item by
    item: their answers must be ``together``'s, the set-based ones (ids ``set-...``)."""
    item_by_item(monkeypatch)
    alone = await calls("one-")
    assert shape(together, "set-") == shape(alone, "one-")


def same_both_ways(tmp_path: Path, database_url: str | None, sql: str
                   ) -> list[tuple[Any, ...]]:
    """The rows ``sql`` reads (a job's id first), after the same calls made once set-based
    (ids ``set-...``) and once item by item (``one-...``): each group's rows must be the
    other's. All the rows, in the order read."""
    rows = read(tmp_path, database_url, sql)
    assert shape([r for r in rows if r[0].startswith("set-")], "set-") == shape(
        [r for r in rows if r[0].startswith("one-")], "one-")
    return rows


async def query_results(gw: Gateway, prefix: str) -> list[list[Json]]:
    """Queries ``{prefix}1``.. leased, one result accepted already, then two batches of
    results: every case, and one with a job's result twice."""
    await batch(gw, "/v1/queries/batch", "t1", {"items": [  # a failure is final
        {**QUERY, "query_id": f"{prefix}{n}", "max_attempts": 1} for n in range(1, 9)]})
    token = {q["query_id"][len(prefix):]: q["lease_token"]
             for q in await lease_queries(gw, "w1", max=100)}

    def item(n: str, outcome: str = "succeeded", **fields: Any) -> Json:
        return {"query_id": f"{prefix}{n}", "lease_token": token.get(n, "x"),
                "outcome": outcome, **fields}

    done = item("3", result={"n": 3})
    for accepted in (done, item("8")):
        status, reply = await call(gw, "POST", f"/v1/queries/{accepted['query_id']}/result",
                                   "worker", {"worker_id": "w1", **without(accepted, "query_id")})
        assert status == 200, reply
    detail = {"code": 7, "message": "boom", "type": "ValueError", "traceback": "Trace\n"}
    mixed = await batch(gw, "/v1/queries/results", "worker", {"worker_id": "w1", "items": [
        item("1", result={"n": 1}, cost=2),
        {**item("2"), "lease_token": token["1"]},   # another query's token: 6006
        done,                                       # a retry of the accepted result
        item("4", "failed", error=detail),          # failed, its error's detail kept
        item("9"),                                  # no such query: 404
        item("5"),
        item("8", "failed"),                        # already succeeded: 6006
    ]})
    twice = await batch(gw, "/v1/queries/results", "worker", {"worker_id": "w1", "items": [
        item("6"), item("6"), item("7", result=[1]), item("7", "failed")]})
    return [mixed, twice]


async def test_a_mixed_batch_of_query_results_answers_each_as_item_by_item(
        gateway: Gateway, tmp_path: Path, database_url: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = spy_finishes(monkeypatch, queries_sql)
    together = await query_results(gateway, "set-")
    # The mixed batch: one UPDATE of its three accepted results; the one with a job's
    # result twice went item by item (the accepted result of each job is one UPDATE).
    assert sizes == [1, 1, 3, 1, 1]
    assert statuses(together[0]) == [200, 409, 200, 200, 404, 200, 409]
    assert codes(together[0]) == [None, 6006, None, None, 6005, None, 6006]
    assert statuses(together[1]) == [200, 200, 200, 409]
    assert together[0][3]["query"]["error"] == {
        "code": 7, "message": "boom", "type": "ValueError", "traceback": "Trace\n"}
    await same_answers_item_by_item(monkeypatch, together,
                                    functools.partial(query_results, gateway))
    # What each way committed, read on a connection of the test's own, is the same too.
    rows = same_both_ways(
        tmp_path, database_url,
        "SELECT query_id, status, result, error_code, error_message, error_type, "
        "error_traceback, cost, outcome_digest FROM queries ORDER BY query_id")
    assert len(rows) == 16
    events = same_both_ways(
        tmp_path, database_url,
        "SELECT job_id, kind, status, detail FROM job_events WHERE kind = 'result' "
        "ORDER BY event_id")
    assert [e[0] for e in events[:7]] == [f"set-{n}" for n in (3, 8, 1, 4, 5, 6, 7)]


async def task_results(gw: Gateway, prefix: str) -> list[Json]:
    """Tasks ``{prefix}1``.. running, one result accepted already, then a batch of
    results of every case."""
    for n in range(1, 7):
        await submit(gw, task_id=f"{prefix}{n}", account=f"{prefix}{n}")
    leased = {i["task_id"][len(prefix):]: i for i in await lease(gw, max=100)}
    await batch(gw, "/v1/tasks/start", "worker", {"worker_id": "w1", "items": [
        {"task_id": i["task_id"], "lease_token": i["lease_token"]} for i in leased.values()]})

    def item(n: str, outcome: str = "succeeded", **fields: Any) -> Json:
        lease = leased.get(n, {"lease_token": "x"})
        return {"task_id": f"{prefix}{n}", "lease_token": lease["lease_token"],
                "outcome": outcome, **fields}

    done = item("3", result={"n": 3}, progress={"step": 2})
    for accepted in (done, item("6")):
        status, reply = await call(gw, "POST", f"/v1/tasks/{accepted['task_id']}/result",
                                   "worker", {"worker_id": "w1", **without(accepted, "task_id")})
        assert status == 200, reply
    detail = {"code": 7, "message": "boom", "type": "ValueError", "traceback": "Trace\n"}
    return await batch(gw, "/v1/tasks/results", "worker", {"worker_id": "w1", "items": [
        item("1", result={"n": 1}, cost=2, progress={"step": 9}),
        {**item("2"), "lease_token": leased["1"]["lease_token"]},   # another's token: 6002
        done,                                                       # a retry: its view
        item("4", "failed", error=detail),
        item("9"),                                                  # no such task: 404
        item("5", "paused"),                                        # not a batch task: 6003
        item("6", "failed"),                                        # done already: 6002
    ]})


async def test_a_mixed_batch_of_task_results_answers_each_as_item_by_item(
        gateway: Gateway, tmp_path: Path, database_url: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = spy_finishes(monkeypatch, tasks_sql)
    together = await task_results(gateway, "set-")
    assert sizes == [1, 1, 2]
    assert statuses(together) == [200, 409, 200, 200, 404, 409, 409]
    assert codes(together) == [None, 6002, None, None, 6001, 6003, 6002]
    await same_answers_item_by_item(monkeypatch, together,
                                    functools.partial(task_results, gateway))
    rows = same_both_ways(
        tmp_path, database_url,
        "SELECT task_id, status, result, error_code, error_message, error_type, "
        "error_traceback, cost, progress, outcome_digest, late_result, "
        "pause_requested FROM tasks ORDER BY task_id")
    assert len(rows) == 12


async def test_a_batch_of_100_results_is_one_update_on_each_channel(
        gateway: Gateway, tmp_path: Path, database_url: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    await credit(gateway, "t1", 1000, "pay-1")
    await batch(gateway, "/v1/queries/batch", "t1", {"items": [
        {**QUERY, "query_id": f"q{n}", "max_cost": 5} for n in range(100)]})
    await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "task_id": f"t{n}", "account": f"a{n}"} for n in range(100)]})
    queries = await lease_queries(gateway, "w1", max=100)
    tasks = await lease(gateway, "w1", max=100)
    assert len(queries) == len(tasks) == 100
    await batch(gateway, "/v1/tasks/start", "worker", {"worker_id": "w1", "items": [
        {"task_id": i["task_id"], "lease_token": i["lease_token"]} for i in tasks]})
    query_sizes = spy_finishes(monkeypatch, queries_sql)
    task_sizes = spy_finishes(monkeypatch, tasks_sql)
    answers = await batch(gateway, "/v1/queries/results", "worker", {"worker_id": "w1", "items": [
        {"query_id": q["query_id"], "lease_token": q["lease_token"], "outcome": "succeeded",
         "result": {"n": n}, "cost": n % 5} for n, q in enumerate(queries)]})
    assert statuses(answers) == [200] * 100
    assert [a["query"]["result"] for a in answers] == [{"n": n} for n in range(100)]
    # The results a lease call carries: set-based too.
    status, reply = await call(gateway, "POST", "/v1/tasks/lease", "worker", {
        "worker_id": "w1", "wait_seconds": 0, "max": 1, "results": [
            {"task_id": i["task_id"], "lease_token": i["lease_token"], "outcome": "failed",
             "error": {"code": n, "message": "no"}} for n, i in enumerate(tasks)]})
    assert status == 200, reply
    assert statuses(reply["results"]) == [200] * 100
    assert query_sizes == task_sizes == [100]
    assert read(tmp_path, database_url,
                "SELECT status, count(*), sum(cost) FROM queries GROUP BY status") == [
        ("succeeded", 100, 200)]
    assert read(tmp_path, database_url,
                "SELECT status, count(*), sum(error_code) FROM tasks GROUP BY status") == [
        ("failed", 100, 4950)]
    assert read(tmp_path, database_url,
                "SELECT channel, count(*) FROM job_events WHERE kind = 'result' "
                "GROUP BY channel ORDER BY channel") == [("query", 100), ("task", 100)]


# ---- starts -------------------------------------------------------------------------

def spy_starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each UPDATE that starts tasks (``tasks_sql.start_many``)."""
    sizes: list[int] = []
    real = tasks_sql.start_many

    def spy(conn: Connection, starts: Any, lease_expires_at: float, now: float) -> list[Any]:
        sizes.append(len(starts))
        done: list[Any] = real(conn, starts, lease_expires_at, now)
        return done

    monkeypatch.setattr(tasks_sql, "start_many", spy)
    return sizes


async def task_starts(gw: Gateway, prefix: str) -> list[Json]:
    """Tasks ``{prefix}1``.. leased, one started already and one canceled, then a batch
    of starts of every case."""
    for n in range(1, 6):
        await submit(gw, task_id=f"{prefix}{n}", account=f"{prefix}{n}")
    leased = {i["task_id"][len(prefix):]: i for i in await lease(gw, max=100)}
    status, reply = await call(gw, "POST", f"/v1/tasks/{prefix}3/start", "worker",
                               fence(leased["3"]))
    assert status == 200, reply
    status, reply = await call(gw, "POST", f"/v1/tasks/{prefix}5/cancel", "t1", {})
    assert status == 200, reply

    def item(n: str, **fields: Any) -> Json:
        lease = leased.get(n, {"lease_token": "x"})
        return {"task_id": f"{prefix}{n}", "lease_token": lease["lease_token"], **fields}

    return await batch(gw, "/v1/tasks/start", "worker", {"worker_id": "w1", "items": [
        item("1"),
        item("2", lease_token=leased["1"]["lease_token"]),  # another task's token: 6002
        item("3"),                                          # a retry: its current state
        item("9"),                                          # no such task: 404
        item("4"),
        item("5"),                                          # canceled meanwhile
    ]})


async def test_a_mixed_batch_of_starts_answers_each_as_item_by_item(
        gateway: Gateway, tmp_path: Path, database_url: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = spy_starts(monkeypatch)
    together = await task_starts(gateway, "set-")
    # The single start before it (a batch of one), then the four not running yet in one
    # UPDATE, which refuses two (token, canceled).
    assert sizes == [1, 4]
    assert statuses(together) == [200, 409, 200, 404, 200, 409]
    assert codes(together) == [None, 6002, None, 6001, None, 6002]
    assert [a["task"]["status"] for a in together if a["status"] == 200] == ["running"] * 3
    await same_answers_item_by_item(monkeypatch, together,
                                    functools.partial(task_starts, gateway))
    rows = same_both_ways(
        tmp_path, database_url,
        "SELECT task_id, status, attempts, lease_owner, lease_token IS NULL, "
        "claim_expires_at IS NULL, started_at IS NULL FROM tasks ORDER BY task_id")
    assert len(rows) == 10
    events = same_both_ways(
        tmp_path, database_url,
        "SELECT job_id, kind, status, detail FROM job_events WHERE kind = 'started' "
        "ORDER BY event_id")
    assert [e[0] for e in events if e[0].startswith("set-")] == ["set-3", "set-1", "set-4"]


async def test_a_batch_of_100_starts_is_one_update(
        gateway: Gateway, tmp_path: Path, database_url: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    await batch(gateway, "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "task_id": f"t{n}", "account": f"a{n}"} for n in range(100)]})
    tasks = await lease(gateway, "w1", max=100)
    sizes = spy_starts(monkeypatch)
    answers = await batch(gateway, "/v1/tasks/start", "worker", {"worker_id": "w1", "items": [
        {"task_id": i["task_id"], "lease_token": i["lease_token"]} for i in tasks]})
    assert statuses(answers) == [200] * 100
    assert [a["task"]["task_id"] for a in answers] == [i["task_id"] for i in tasks]
    assert sizes == [100]
    assert read(tmp_path, database_url,
                "SELECT status, count(*), sum(attempts) FROM tasks GROUP BY status") == [
        ("running", 100, 100)]
    assert read(tmp_path, database_url,
                "SELECT count(*) FROM job_events WHERE kind = 'started'") == [(100,)]
