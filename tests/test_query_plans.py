"""A lease costs the same whatever is queued behind blocked lanes or retained finished.

The lease queries are checked by their plans (``EXPLAIN QUERY PLAN`` of every
statement a lease runs: an index, never a walk of ``tasks`` or ``queries``),
the lane rule by its behaviour over HTTP (a blocked lane is skipped until a
reclaim or a result frees it; order across lanes is priority, then age, even
when a lane's best task waits for its ``not_before``), and the lanes table by
a model: after any sequence of transitions the lease picks exactly what a
walk of the whole queue would. Migration 9 fills the lanes of an existing
database.
"""

from __future__ import annotations

import random
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage import lanes_sql, queries_sql, tasks_sql
from leasegate.storage.connection import connect
from leasegate.storage.migrations import migrate, statements
from leasegate.storage.rows import marks
from tests.conftest import EPOCH, Gateway, start_gateway

Json = dict[str, Any]
RECLAIM: Json = {"action": "requeue", "reason": "checked the site: nothing happened"}


# ---- plans ---------------------------------------------------------------------------

class Recorder(sqlite3.Connection):
    """A second connection to the test's database that remembers every statement run
    through it: a real sqlite3 connection, so the storage spells each one as it does
    for SQLite (a wrapper would be taken for PostgreSQL's connection)."""

    statements: list[tuple[str, list[Any]]]

    def execute(self, sql: str, args: Any = (), /) -> sqlite3.Cursor:
        self.statements.append((sql, list(args)))
        return super().execute(sql, args)


def recording(conn: sqlite3.Connection) -> Recorder:
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    recorder = sqlite3.connect(path, factory=Recorder, isolation_level=None)
    recorder.row_factory = conn.row_factory
    recorder.statements = []
    return recorder


def plan(conn: sqlite3.Connection, sql: str, args: list[Any]) -> list[str]:
    return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args)]


def assert_seeks(lines: list[str], sql: str) -> None:
    """Every step on tasks or queries is an index seek; lanes are read by index."""
    assert lines, sql
    for line in lines:
        step = re.match(r"(SCAN|SEARCH) (\w+)", line)
        if step is not None and step[2] in ("tasks", "queries", "t", "b"):
            assert step[1] == "SEARCH" and "INDEX" in line, (line, sql)
        if step is not None and step[2] in ("task_lanes", "l"):
            assert "USING INDEX" in line or "PRIMARY KEY" in line, (line, sql)


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    c = connect(tmp_path / "plans.db", synchronous="OFF")
    migrate(c)
    return c


def add_task(conn: sqlite3.Connection, task_id: str, site: str, account: str, *,
             priority: int = 0, not_before: float | None = None, at: float = EPOCH) -> None:
    assert tasks_sql.JOBS.insert_many(conn, [dict(
        task_id=task_id, tenant="t1", site=site, account=account, kind="k", params="{}",
        priority=priority, not_before=not_before, fingerprint="f", status="queued",
        created_at=at, updated_at=at, expires_at=at + 3600)]) == 1


@pytest.mark.parametrize("sites", [None, ["s1"], ["s1", "s2"]])
def test_the_task_lease_seeks_free_lanes_only(conn: sqlite3.Connection,
                                              sites: list[str] | None) -> None:
    # A lane whose head waits for not_before (a seek into the lane), and enough lanes
    # for a second page: every statement kind a task lease runs.
    add_task(conn, "later", "s1", "a", priority=5, not_before=EPOCH + 60)
    add_task(conn, "now", "s1", "a", at=EPOCH + 1)
    add_task(conn, "never", "s1", "c", priority=5, not_before=EPOCH + 60)
    for n in range(6):
        add_task(conn, f"t{n}", f"s{1 + n % 2}", f"b{n}", at=EPOCH + 2 + n)
    recorder = recording(conn)
    picked = tasks_sql.next_queued(recorder, sites, EPOCH + 10, 3)
    assert [row["task_id"] for row in picked] == (
        ["now", "t0", "t2"] if sites == ["s1"] else ["now", "t0", "t1"])
    kinds = {sql for sql, _ in recorder.statements}
    assert any(sql.startswith(lanes_sql.LANE_BEST) for sql in kinds)
    assert any(") > (" in sql for sql in kinds)  # a later page, by keyset
    for sql, args in recorder.statements:
        assert_seeks(plan(conn, sql, args), sql)


@pytest.mark.parametrize("sites", [None, ["s1"], ["s1", "s2"]])
def test_the_query_lease_reads_queued_rows_only(conn: sqlite3.Connection,
                                                sites: list[str] | None) -> None:
    # Finished ones first (a walk in rowid order would meet them), then queued ones.
    for n, site in enumerate(["s1", "s2", "s1", "s2", "s1", "s1", "s1", "s2"]):
        queries_sql.JOBS.insert_many(conn, [dict(
            query_id=f"q{n}", tenant="t1", site=site, kind="k", params="{}", fingerprint="f",
            status="succeeded" if n < 4 else "queued", created_at=EPOCH, expires_at=EPOCH + 60,
            updated_at=EPOCH)])
    recorder = recording(conn)
    picked = queries_sql.next_queued(recorder, sites, EPOCH, 3)
    assert [row["query_id"] for row in picked] == ["q4", "q5", "q6"]
    # Two sites: two pages of s1's stream, the second by keyset.
    assert any(") > (" in sql for sql, _ in recorder.statements) == (sites == ["s1", "s2"])
    for sql, args in recorder.statements:
        assert_seeks(plan(conn, sql, args), sql)


def test_a_sites_backlog_is_index_seeks_never_a_walk_of_the_queue(
        conn: sqlite3.Connection) -> None:
    """The backlog's depth is an index-only count of the site's leasable queries (or free
    lanes), its oldest age one seek: never a walk of the queued or waiting rows."""
    for n in range(6):
        add_task(conn, f"t{n}", "s1", f"a{n % 3}", at=EPOCH + n)
        queries_sql.JOBS.insert_many(conn, [dict(
            query_id=f"q{n}", tenant="t1", site="s1", kind="k", params="{}", fingerprint="f",
            status="queued", created_at=EPOCH + n, expires_at=EPOCH + 600, updated_at=EPOCH,
            available_at=EPOCH + n, next_attempt_at=EPOCH + 60 if n < 2 else None)])
    for read in (queries_sql.backlog, lanes_sql.backlog):
        recorder = recording(conn)
        read(recorder, "s1")
        for sql, args in recorder.statements:
            steps = [line for line in plan(conn, sql, args)
                     if line.startswith(("SCAN", "SEARCH"))]
            # the index alone (a count reads no row), or the one head's row by its key
            assert steps and all(line.startswith("SEARCH") and (
                "COVERING INDEX" in line or "sqlite_autoindex_tasks_1 (task_id=?)" in line)
                for line in steps), (steps, sql)
    # waiting queries (q0, q1) are not leasable; the oldest leasable became so at EPOCH + 2
    assert queries_sql.backlog(conn, "s1") == (4, EPOCH + 2)
    assert lanes_sql.backlog(conn, "s1") == (3, EPOCH)  # three free lanes, t0 the oldest head


def test_every_transition_refreshes_its_lane_by_index_seeks(conn: sqlite3.Connection) -> None:
    """The lane triggers as the database has them: each refresh seeks, never walks."""
    triggers = conn.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' "
                            "AND name IN ('task_lanes_insert', 'task_lanes_update', "
                            "'task_lanes_leave', 'task_lanes_delete')").fetchall()
    assert len(triggers) == 4
    for name, trigger in triggers:
        refresh = statements(trigger[trigger.index("\nBEGIN\n") + 7:trigger.rindex("END")])
        assert len(refresh) == 2, name
        for sql in refresh:
            sql = re.sub(r"\b(NEW|OLD)\.site\b", "'s1'", sql)
            sql = re.sub(r"\b(NEW|OLD)\.account\b", "'a'", sql)
            lines = plan(conn, sql, [])
            assert any("tasks_one_per_lane" in line for line in lines) or "DELETE" in sql, (
                name, lines)
            assert_seeks(lines, sql)


def test_a_workers_in_flight_tasks_are_found_on_the_partial_index(
        conn: sqlite3.Connection) -> None:
    """The in-flight test is spelled as the partial indexes spell it, or SQLite walks
    every task a worker ever ran (presence, the workers purge)."""
    sql = (f"SELECT lease_owner, task_id FROM tasks WHERE {lanes_sql.in_flight()} "
           "AND lease_owner IN (?, ?)")
    assert any("tasks_lease_owner" in line for line in plan(conn, sql, ["w1", "w2"]))
    sql = (f"SELECT 1 FROM tasks WHERE tasks.lease_owner = ? "
           f"AND {lanes_sql.in_flight('tasks.status')}")
    assert any("tasks_lease_owner" in line for line in plan(conn, sql, ["w1"]))


def test_the_in_flight_test_is_spelled_as_the_partial_indexes_spell_it(
        conn: sqlite3.Connection) -> None:
    for index in ("tasks_one_per_lane", "tasks_lease_owner"):
        (sql,) = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'index' "
                              "AND name = ?", (index,)).fetchone()
        assert sql.endswith(f" WHERE {lanes_sql.in_flight()}"), sql


def test_unfinished_tasks_are_counted_on_partial_indexes(conn: sqlite3.Connection) -> None:
    """The console's overview counts unfinished tasks: never by reading the finished
    ones kept for retention."""
    for status in tasks_sql.UNFINISHED:
        lines = plan(conn, "SELECT count(*) FROM tasks WHERE status = ?", [status])
        assert all("INDEX" in line for line in lines), (status, lines)


# ---- the lane rule over HTTP -----------------------------------------------------------

async def submit(gw: Gateway, task_id: str, account: str, site: str = "shop",
                 **fields: Any) -> None:
    status, reply = await gw.call("POST", "/v1/tasks", "t1", json={
        "site": site, "account": account, "kind": "place_order", "params": {},
        "task_id": task_id, **fields})
    assert status == 201, reply


async def lease(gw: Gateway, worker_id: str = "w1", **fields: Any) -> list[Json]:
    status, reply = await gw.call("POST", "/v1/tasks/lease", "worker",
                                  json={"worker_id": worker_id, "wait_seconds": 0, **fields})
    assert status == 200, reply
    items: list[Json] = reply["items"]
    return items


async def fenced(gw: Gateway, item: Json, action: str, worker_id: str = "w1",
                 **body: Any) -> Json:
    status, reply = await gw.call("POST", f"/v1/tasks/{item['task_id']}/{action}", "worker",
                                  json={"worker_id": worker_id,
                                        "lease_token": item["lease_token"], **body})
    assert status == 200, reply
    done: Json = reply
    return done


def ids(items: list[Json]) -> list[str]:
    return [item["task_id"] for item in items]


async def test_a_stale_lane_is_skipped_until_reclaimed(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, "first", "blocked")
    [item] = await lease(gateway)
    await fenced(gateway, item, "start")
    await trio.sleep(121)  # the lease lapses: stale, its lane blocked
    for n in range(5):
        await submit(gateway, f"behind-{n}", "blocked", priority=9)
    await submit(gateway, "free-0", "other", site="mall")
    assert await lease(gateway, "w2", max=10, sites=["shop"]) == []
    assert ids(await lease(gateway, "w2", max=10)) == ["free-0"]
    await submit(gateway, "free-1", "other-1", site="mall")
    assert ids(await lease(gateway, "w2", max=10, sites=["shop", "mall"])) == ["free-1"]

    status, reply = await gateway.call("POST", "/v1/tasks/first/reclaim", "admin", json=RECLAIM)
    assert status == 200 and reply["status"] == "queued", reply
    # Free again: its best task (priority 9 beats the requeued one), one per lane.
    assert ids(await lease(gateway, "w2", max=10, sites=["shop"])) == ["behind-0"]


async def test_a_result_frees_the_lane_and_order_holds_across_lanes(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, "a-later", "a", priority=9, not_before="2026-11-30T08:01:00Z")
    await submit(gateway, "a-now", "a", priority=1)
    await submit(gateway, "b-now", "b", priority=5)
    await submit(gateway, "a-next", "a", priority=1)
    # a's head waits for its not_before; its best leasable task ranks by its own priority.
    assert ids(await lease(gateway, max=1)) == ["b-now"]
    [a_now] = await lease(gateway, max=10)
    assert a_now["task_id"] == "a-now"
    assert await lease(gateway, max=10) == []  # both lanes taken
    await fenced(gateway, a_now, "start")
    await fenced(gateway, a_now, "result", outcome="succeeded")
    [a_next] = await lease(gateway, max=10)
    assert a_next["task_id"] == "a-next"
    await fenced(gateway, a_next, "start")
    await fenced(gateway, a_next, "result", outcome="failed")
    await trio.sleep(60)  # a-later is due; b-now's claim lapsed unstarted (back to queued)
    assert ids(await lease(gateway, max=10)) == ["a-later", "b-now"]


async def test_queries_lease_oldest_first_across_sites_past_finished_ones(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    for n, site in enumerate(["s1", "s1", "s2", "s1", "s2"]):
        status, reply = await gateway.call("POST", "/v1/queries", "t1", json={
            "site": site, "kind": "balance", "params": {}, "query_id": f"q{n}"})
        assert status == 201, reply
    body = {"worker_id": "w1", "wait_seconds": 0, "max": 1}
    status, reply = await gateway.call("POST", "/v1/queries/lease", "worker", json=body)
    [done] = reply["items"]
    status, reply = await gateway.call("POST", f"/v1/queries/{done['query_id']}/result", "worker",
                                       json={"worker_id": "w1", "outcome": "succeeded",
                                             "lease_token": done["lease_token"]})
    assert status == 200, reply
    status, reply = await gateway.call("POST", "/v1/queries/lease", "worker",
                                       json={**body, "max": 3, "sites": ["s2", "s1"]})
    assert status == 200, reply
    assert [item["query_id"] for item in reply["items"]] == ["q1", "q2", "q3"]


# ---- migration and model -----------------------------------------------------------------

async def test_an_existing_database_gets_its_lanes(
        tmp_path: Path, nursery: trio.Nursery, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    path = tmp_path / "leasegate.db"
    old = connect(path, synchronous="OFF")
    migrate(old, upto=8)
    add_task(old, "taken", "shop", "blocked", at=EPOCH - 100)
    assert tasks_sql.take_leases(old, [("taken", "token")], "w0", None, EPOCH + 3600,
                                 EPOCH - 100)
    add_task(old, "behind", "shop", "blocked", priority=9, at=EPOCH - 50)
    add_task(old, "ready", "shop", "free", at=EPOCH - 10)
    add_task(old, "better", "shop", "free", priority=3, at=EPOCH - 5)
    old.close()
    gateway = await start_gateway(nursery, path, settings, clock)  # migrates
    assert ids(await lease(gateway, max=10)) == ["better"]


def full_walk(conn: sqlite3.Connection, sites: list[str] | None, now: float,
              limit: int) -> list[str]:
    """The lease as a walk of the whole queue (before the lanes table): the model."""
    site_clause = "" if sites is None else f" AND t.site IN ({marks(sites)})"
    rows = conn.execute(
        "SELECT t.task_id, t.site, t.account FROM tasks AS t WHERE t.status = 'queued' "
        f"AND (t.not_before IS NULL OR t.not_before <= ?) AND t.expires_at > ?{site_clause} "
        "AND NOT EXISTS (SELECT 1 FROM tasks AS o WHERE o.site = t.site "
        "AND o.account = t.account AND o.status IN ('leased', 'running', 'stale')) "
        "ORDER BY t.priority DESC, t.created_at, t.rowid", [now, now, *(sites or [])])
    picked: dict[tuple[str, str], str] = {}
    for task_id, site, account in rows:
        picked.setdefault((site, account), task_id)
    return list(picked.values())[:limit]


def transition(conn: sqlite3.Connection, rnd: random.Random, now: float) -> None:
    """One random transition of one random unfinished task, through tasks_sql."""
    row = conn.execute("SELECT * FROM tasks WHERE status IN ('queued', 'leased', 'running', "
                       "'stale', 'paused') ORDER BY random() LIMIT 1").fetchone()
    if row is None:
        return
    task_id, status, token, pick = row["task_id"], row["status"], row["lease_token"], rnd.random()
    if status == "leased" and pick < 0.5:
        tasks_sql.start_many(conn, [(task_id, token, "w", now)], now + 5, now)
    elif status == "leased":
        tasks_sql.back_to_queue(conn, task_id, "leased", token,
                                rnd.choice(["queued", "paused", "canceled"]), now)
    elif status == "running" and pick < 0.4:
        tasks_sql.make_stale(conn, task_id, token, "lapsed", now)
    elif status == "running":
        tasks_sql.finish_many(conn, [tasks_sql.TaskFinish(
            job_id=task_id, from_status="running", lease_token=token,
            status=rnd.choice(["succeeded", "paused"]), result=None, error_code=None,
            error_message=None, cost=None, progress=None, outcome_digest="d",
            late_result=0, error_type=None, error_traceback=None)], now)
    elif status == "stale":
        tasks_sql.reclaim(conn, task_id, token, rnd.choice(["queued", "failed", "paused"]),
                          action="a", reason="r", by="b", now=now, result=None,
                          error_message=None, cost=None, expires_at=now + 30)
    elif status == "queued" and pick < 0.3:
        tasks_sql.cancel_unleased(conn, task_id, "queued", token, now)
    elif status == "queued" and pick < 0.5:
        tasks_sql.pause_queued(conn, task_id, token, now)
    elif status == "queued":
        tasks_sql.expire_past_ttl(conn, now, 1.0)
    elif status == "paused":
        tasks_sql.resume(conn, task_id, token, now + 30, now)
    if rnd.random() < 0.05:
        tasks_sql.JOBS.purge_completed_before(conn, now, now)


@pytest.mark.parametrize("seed", range(8))
def test_the_lanes_lease_picks_what_a_full_walk_would(conn: sqlite3.Connection,
                                                      seed: int) -> None:
    rnd = random.Random(seed)
    now = EPOCH
    for step in range(250):
        now += rnd.random()
        choice = rnd.random()
        if choice < 0.4:
            not_before = None if rnd.random() < 0.7 else now + rnd.uniform(-5, 5)
            add_task(conn, f"t{step}", f"s{rnd.randrange(3)}", f"a{rnd.randrange(4)}",
                     priority=rnd.randrange(3), not_before=not_before,
                     at=float(round(now)) if rnd.random() < 0.5 else now)
        elif choice < 0.6:
            sites = (None if rnd.random() < 0.5
                     else rnd.sample(["s0", "s1", "s2", "s9"], rnd.randrange(1, 4)))
            limit = rnd.randrange(1, 6)
            picked = [r["task_id"] for r in tasks_sql.next_queued(conn, sites, now, limit)]
            assert picked == full_walk(conn, sites, now, limit), (seed, step)
            for task_id in picked:
                if rnd.random() < 0.8:
                    assert tasks_sql.take_leases(conn, [(task_id, f"tok-{task_id}")], "w",
                                                 None, now + 5, now)
        else:
            transition(conn, rnd, now)
