"""The task actor driven directly: every transition and race of the task state machine.

Defaults: claim window 30 s, lease 120 s, hard timeout 4 h, task_ttl 24 h,
retention 7 d, worker offline after 90 s. Wall time starts at EPOCH
(2026-11-30T08:00:00Z). Deadlines are read back from the database without
sending the actor a message, so they prove that the timer fired on its own.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.actors.pages import Page
from leasegate.actors.runtime.actor import Actor
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.actor import open_tasks
from leasegate.actors.tasks.control import ControlTask, ReclaimAction, ReclaimTask
from leasegate.actors.tasks.fenced import RenewTask, StartTask, TaskOutcome, TaskResult
from leasegate.actors.tasks.lease import LeaseTasks, ReleaseTaskLeases, release_message
from leasegate.actors.tasks.presence import CheckTaskHealth, ListWorkers
from leasegate.actors.tasks.reads import GetTask, ListTasks
from leasegate.actors.tasks.submit import SubmitTask
from leasegate.actors.tasks.turn import TaskTurn
from leasegate.clock import Clock, iso
from leasegate.errors import (
    IdempotencyConflict,
    InvalidRequest,
    StateConflict,
    TaskLeaseInvalid,
    TaskNotFound,
    Unavailable,
)
from leasegate.settings import Settings
from leasegate.storage.connection import Database
from tests.conftest import EPOCH, ask, assert_none_lost_at_hand_off, open_db, parked, started

pytestmark = pytest.mark.both_engines  # the behavioural suite: SQLite and PostgreSQL

TaskActor = Actor[Tasks, TaskTurn]

HOUR = 3600.0
DAY = 86400.0


@pytest.fixture
async def queue(nursery: trio.Nursery, db: Database, clock: Clock,
                settings: Settings) -> TaskActor:
    return await started(nursery, open_tasks(db, clock, settings))


async def submit(q: TaskActor, task_id: str = "t1", site: str = "shop", account: str = "-",
                 **kw: Any) -> dict[str, Any]:
    params = kw.pop("params", {"sku": task_id})
    reply: dict[str, Any] = await ask(
        q, SubmitTask("ten1", site, "order", params, task_id, account, **kw))
    return reply


async def lease(q: TaskActor, worker: str = "w1", **kw: Any) -> list[dict[str, Any]]:
    reply: list[dict[str, Any]] = await ask(q, LeaseTasks(worker, **kw))
    return reply


async def lease_one(q: TaskActor, worker: str = "w1", **kw: Any) -> dict[str, Any]:
    [got] = await lease(q, worker, **kw)
    return got


async def start(q: TaskActor, got: dict[str, Any], worker: str = "w1") -> dict[str, Any]:
    reply: dict[str, Any] = await ask(q, StartTask(got["task_id"], worker, got["lease_token"]))
    return reply


async def renew(q: TaskActor, got: dict[str, Any], worker: str = "w1",
                progress: dict[str, Any] | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = await ask(
        q, RenewTask(got["task_id"], worker, got["lease_token"], progress))
    return reply


async def report(q: TaskActor, got: dict[str, Any], outcome: TaskOutcome = "succeeded",
                 worker: str = "w1", **kw: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await ask(
        q, TaskResult(got["task_id"], worker, got["lease_token"], outcome, **kw))
    return reply


async def running(q: TaskActor, task_id: str = "t1", worker: str = "w1",
                  **kw: Any) -> dict[str, Any]:
    """Submit, lease and start one task; returns its lease."""
    await submit(q, task_id, **kw)
    got = await lease_one(q, worker)
    assert got["task_id"] == task_id
    await start(q, got, worker)
    return got


async def get(q: TaskActor, task_id: str = "t1") -> dict[str, Any]:
    reply: dict[str, Any] = await ask(q, GetTask(task_id))
    return reply


def raw(db: Database, task_id: str = "t1") -> dict[str, Any]:
    """The row as stored, read without sending the actor a message."""
    row = db.run_sync(lambda c: c.execute("SELECT * FROM tasks WHERE task_id = ?",
                                          (task_id,)).fetchone())
    assert row is not None
    return dict(row)


def elapsed(clock: Clock) -> float:
    return clock.now() - EPOCH


def at(seconds: float) -> str | None:
    return iso(EPOCH + seconds)


async def advance(seconds: float) -> None:
    await trio.sleep(seconds)
    await trio.testing.wait_all_tasks_blocked()


# ---- submit and read ------------------------------------------------------------------

async def test_submit_is_idempotent(queue: TaskActor) -> None:
    # (site_paused false: the HTTP edge leaves it out, see test_query_retries)
    assert await submit(queue) == {"task_id": "t1", "status": "queued", "created": True,
                                   "site_paused": False}
    assert await submit(queue) == {"task_id": "t1", "status": "queued", "created": False,
                                   "site_paused": False}
    await lease(queue)
    assert (await submit(queue))["status"] == "leased"  # the current status
    with pytest.raises(IdempotencyConflict):
        await submit(queue, params={"sku": "other"})
    with pytest.raises(IdempotencyConflict):
        await submit(queue, priority=3)
    with pytest.raises(IdempotencyConflict):  # another tenant cannot replay it
        await ask(queue, SubmitTask("ten2", "shop", "order", {"sku": "t1"}, "t1"))
    generated = await ask(queue, SubmitTask("ten1", "shop", "order", {}))
    assert generated["created"] is True and generated["task_id"].startswith("t-")
    assert len(generated["task_id"]) == 2 + 24  # 96 random bits


async def test_task_object(queue: TaskActor) -> None:
    await submit(queue, account="acct", priority=4, device_id="d1", batch_total=10, max_cost=50)
    assert await get(queue) == {
        "task_id": "t1", "tenant": "ten1", "site": "shop", "account": "acct", "kind": "order",
        "params": {"sku": "t1"}, "priority": 4, "status": "queued", "device_id": "d1",
        "batch_total": 10, "progress": None, "lease_owner": None, "lease_expires_at": None,
        "attempts": 0, "cancel_requested": False, "pause_requested": False,
        "created_at": at(0), "updated_at": at(0), "started_at": None, "completed_at": None,
        "result": None, "error": None, "stale_reason": None, "reclaim": None,
        "billing": {"max_cost": 50, "charged": None, "refunded": None, "hold_status": None},
        "late_result": False, "errors": [],
    }


async def test_other_tenant_sees_not_found(queue: TaskActor) -> None:
    await submit(queue)
    assert (await ask(queue, GetTask("t1", "ten1")))["task_id"] == "t1"
    for message in (GetTask("t1", "ten2"), ControlTask("t1", "cancel", "ten2"), GetTask("nope")):
        with pytest.raises(TaskNotFound):
            await ask(queue, message)


async def test_list_filters(queue: TaskActor) -> None:
    await submit(queue, "a", site="s1", account="x")
    await submit(queue, "b", site="s2", account="x")
    await submit(queue, "c", site="s2", account="y")
    page = await ask(queue, ListTasks(tenant="ten1", site="s2"))
    assert [t["task_id"] for t in page["items"]] == ["c", "b"] and page["total"] == 2
    page = await ask(queue, ListTasks(account="x", page=Page(limit=1, offset=1)))
    assert [t["task_id"] for t in page["items"]] == ["a"]
    assert (page["total"], page["limit"], page["offset"]) == (2, 1, 1)
    await lease(queue, sites=("s1",))
    page = await ask(queue, ListTasks(status="leased", kind="order"))
    assert [t["task_id"] for t in page["items"]] == ["a"]
    assert (await ask(queue, ListTasks(tenant="ten2")))["total"] == 0


# ---- lease, start, renew, result --------------------------------------------------------

async def test_happy_path_with_exact_times(queue: TaskActor, clock: Clock,
                                           autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    got = await lease_one(queue)
    assert got == {"task_id": "t1", "site": "shop", "account": "-", "kind": "order",
                   "params": {"sku": "t1"}, "progress": None, "attempt": 1,
                   "lease_token": got["lease_token"], "claim_expires_at": at(30)}
    row = await get(queue)
    assert (row["status"], row["attempts"], row["lease_owner"], row["lease_expires_at"]) == (
        "leased", 0, "w1", at(30))  # a claim burns no attempt
    await trio.sleep(10)
    assert await start(queue, got) == {"task_id": "t1", "status": "running",
                                       "lease_expires_at": at(130),
                                       "cancel_requested": False, "pause_requested": False}
    row = await get(queue)
    assert (row["status"], row["attempts"], row["started_at"]) == ("running", 1, at(10))
    await trio.sleep(60)
    assert await renew(queue, got, progress={"step": 2}) == {
        "lease_expires_at": at(190), "cancel_requested": False, "pause_requested": False}
    assert (await get(queue))["progress"] == {"step": 2}
    await trio.sleep(5)
    done = await report(queue, got, result={"order": "o-1"}, cost=7)
    assert (done["status"], done["result"], done["completed_at"], done["error"]) == (
        "succeeded", {"order": "o-1"}, at(75), None)
    assert (done["lease_expires_at"], done["late_result"], done["billing"]) == (None, False, None)
    assert elapsed(clock) == 75


async def test_result_retry_and_conflict(queue: TaskActor) -> None:
    got = await running(queue)
    first = await report(queue, got, "failed", error_code=17, error_message="sold out")
    assert first["error"] == {"code": 17, "message": "sold out", "type": None, "traceback": None}
    # The same body again (the response was lost): 200 with the current object.
    assert await report(queue, got, "failed", error_code=17, error_message="sold out") == first
    with pytest.raises(TaskLeaseInvalid):  # a different outcome for a finished task
        await report(queue, got, "succeeded")
    with pytest.raises(TaskLeaseInvalid):  # the same body from another worker
        await report(queue, got, "failed", worker="w2", error_code=17, error_message="sold out")


async def test_start_retry_is_the_same_reply(queue: TaskActor,
                                             autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    got = await lease_one(queue)
    first = await start(queue, got)
    await trio.sleep(5)
    assert await start(queue, got) == first
    assert (await get(queue))["attempts"] == 1
    with pytest.raises(TaskLeaseInvalid):
        await start(queue, got, worker="w2")


async def test_fenced_calls_need_the_current_lease(queue: TaskActor,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="leasegate.tasks")
    await submit(queue)
    got = await lease_one(queue)
    forged = {**got, "lease_token": "forged"}
    with pytest.raises(TaskLeaseInvalid):
        await start(queue, forged)
    with pytest.raises(TaskLeaseInvalid):  # a worker that never started must not report
        await report(queue, got)
    with pytest.raises(TaskLeaseInvalid):
        await renew(queue, got)
    await start(queue, got)
    with pytest.raises(TaskLeaseInvalid):
        await renew(queue, forged)
    with pytest.raises(TaskLeaseInvalid):
        await renew(queue, got, worker="w2")
    with pytest.raises(TaskLeaseInvalid):
        await report(queue, forged)
    with pytest.raises(TaskNotFound):
        await start(queue, {**got, "task_id": "nope"})
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 6  # 6001 is not a fencing refusal
    assert refusals[0].startswith("task start refused: worker=w1 task_id=t1 status=leased")
    assert "under another lease" in refusals[0]
    assert "never started" in refusals[1]
    assert "another worker" in refusals[4]
    row = await get(queue)
    assert (row["status"], row["attempts"]) == ("running", 1)


async def test_invalid_outcomes(queue: TaskActor) -> None:
    got = await running(queue)
    with pytest.raises(InvalidRequest):
        await report(queue, got, "done")  # type: ignore[arg-type]
    with pytest.raises(StateConflict):  # paused is only for batch tasks
        await report(queue, got, "paused")
    assert (await get(queue))["status"] == "running"
    with pytest.raises(InvalidRequest):
        await lease(queue, max=101)


# ---- the claim window -------------------------------------------------------------------

async def test_claim_expiry_returns_to_queued_without_burning_an_attempt(
        queue: TaskActor, db: Database, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    first = await lease_one(queue)
    await advance(29.9)
    assert raw(db)["status"] == "leased"
    await advance(0.1)  # exactly the claim expiry: the timer fires, no message needed
    row = raw(db)
    assert (row["status"], row["attempts"], row["lease_owner"], row["lease_token"]) == (
        "queued", 0, None, None)
    assert (row["updated_at"], elapsed(clock)) == (EPOCH + 30, 30)
    second = await lease_one(queue, "w2")
    assert second["attempt"] == 1 and second["lease_token"] != first["lease_token"]


async def test_start_just_after_the_claim_expired_is_refused(
        queue: TaskActor, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="leasegate.tasks")
    await submit(queue)
    got = await lease_one(queue)
    await trio.sleep(30)  # the start arrives at the very deadline
    with pytest.raises(TaskLeaseInvalid):
        await start(queue, got)
    assert "is queued and holds none" in caplog.records[-1].getMessage()
    # The task was re-leasable at once, and the other worker's start works.
    other = await lease_one(queue, "w2")
    assert (await start(queue, other, "w2"))["status"] == "running"
    with pytest.raises(TaskLeaseInvalid):  # the first worker is fenced off for good
        await start(queue, got)
    row = await get(queue)
    assert (row["attempts"], row["lease_owner"]) == (1, "w2")


async def test_start_just_before_the_claim_expires(
        queue: TaskActor, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    got = await lease_one(queue)
    await trio.sleep(29.999)
    assert (await start(queue, got))["lease_expires_at"] == at(149)


async def test_release_leases_burns_nothing(queue: TaskActor) -> None:
    await submit(queue, "a", site="s1")
    await submit(queue, "b", site="s2")
    leases = await queue.ref.ask(LeaseTasks("w1", max=2))
    message = release_message(leases)
    assert message == ReleaseTaskLeases(tuple((g.task_id, g.lease_token) for g in leases))
    await queue.ref.tell(ReleaseTaskLeases((("a", "wrong-token"),)))
    assert (await get(queue, "a"))["status"] == "leased"
    await queue.ref.tell(message)
    for task_id in ("a", "b"):
        row = await get(queue, task_id)
        assert (row["status"], row["attempts"], row["lease_owner"]) == ("queued", 0, None)


async def test_lost_lease_response_is_replayed_by_request_id(queue: TaskActor) -> None:
    await submit(queue, "a", site="s1")
    await submit(queue, "b", site="s2")
    first = await lease(queue, max=2, request_id="r1")
    assert [g["task_id"] for g in first] == ["a", "b"]
    assert await lease(queue, max=2, request_id="r1") == first  # same claims, same tokens
    assert await lease(queue, "w2", request_id="r1") == []  # another worker: no replay
    await start(queue, first[0])
    assert await lease(queue, max=2, request_id="r1") == [first[1]]  # still-unstarted only
    assert (await get(queue, "a"))["attempts"] == 1


# ---- running leases: stale, late results, hard timeout ------------------------------------

async def test_lease_expiry_makes_the_task_stale_and_blocks_its_lane(
        queue: TaskActor, db: Database, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="leasegate.tasks")
    got = await running(queue)
    await submit(queue, "t2")
    await trio.sleep(100)
    assert (await renew(queue, got))["lease_expires_at"] == at(220)
    await advance(120)
    row = raw(db)
    assert (row["status"], row["stale_at"]) == ("stale", EPOCH + 220)
    assert row["stale_reason"] == f"lease_expired: worker w1 stopped renewing at {at(100)}"
    assert any("task stale, lane shop/- blocked" in r.getMessage() for r in caplog.records)
    with pytest.raises(TaskLeaseInvalid):
        await renew(queue, got)
    assert await lease(queue, "w2") == []  # the lane stays blocked: never retried
    await advance(DAY)
    assert raw(db)["status"] == "stale"
    assert raw(db, "t2")["status"] == "expired"  # waited a day behind the stale task
    report = await ask(queue, CheckTaskHealth(20))
    assert report["stale"] == 1
    assert report["blocked_lanes"] == [
        {"site": "shop", "account": "-", "task_id": "t1", "since": at(220)}]


async def test_result_just_after_the_lease_went_stale_is_accepted_late(
        queue: TaskActor, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="leasegate.tasks")
    got = await running(queue, batch_total=5)
    await submit(queue, "t2")
    await trio.sleep(120)  # the result arrives at the very expiry: the task is stale first
    with pytest.raises(TaskLeaseInvalid):  # only from its last lease
        await report(queue, {**got, "lease_token": "older"})
    done = await report(queue, got, result={"order": "o-9"})
    assert (done["status"], done["late_result"], done["result"]) == (
        "succeeded", True, {"order": "o-9"})
    assert done["stale_reason"].startswith("lease_expired")
    assert any("late result accepted" in r.getMessage() for r in caplog.records)
    assert await report(queue, got, result={"order": "o-9"}) == done  # retry
    assert (await lease_one(queue, "w2"))["task_id"] == "t2"  # the lane is free again


async def test_a_stale_batch_task_takes_its_last_leases_pause_and_checkpoint(
        queue: TaskActor, autojump_clock: trio.testing.MockClock) -> None:
    got = await running(queue, batch_total=10)
    await trio.sleep(120)  # stale
    paused = await report(queue, got, "paused", progress={"done": 7})
    assert (paused["status"], paused["progress"], paused["late_result"]) == (
        "paused", {"done": 7}, True)
    assert await report(queue, got, "paused", progress={"done": 7}) == paused  # retry


async def test_hard_timeout_makes_a_renewed_task_stale(
        queue: TaskActor, db: Database, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    got = await running(queue)
    refused: list[float] = []

    async def renewer() -> None:
        while True:
            await trio.sleep(70)
            try:
                await renew(queue, got)
            except TaskLeaseInvalid:
                refused.append(elapsed(clock))
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(renewer)
        await advance(4 * HOUR - 1)
        assert raw(db)["status"] == "running"
        await advance(1)
        row = raw(db)
        assert (row["status"], row["stale_at"]) == ("stale", EPOCH + 4 * HOUR)
        assert row["stale_reason"] == (
            f"hard_timeout: running since {at(0)} under worker w1, longer than "
            "task_hard_timeout (14400 s)")
    assert refused == [14420]  # the first renew after the hard timeout


# ---- TTL, not_before, priority, lanes ----------------------------------------------------

async def test_task_ttl_expires_a_queued_task(queue: TaskActor, db: Database,
                                              autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    await advance(DAY - 1)
    assert raw(db)["status"] == "queued"
    await advance(1)
    row = raw(db)
    assert (row["status"], row["completed_at"]) == ("expired", EPOCH + DAY)
    assert "task_ttl" in row["error_message"]
    assert await lease(queue) == []


async def test_task_ttl_counts_only_while_queued(queue: TaskActor, db: Database,
                                                 autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    await trio.sleep(DAY - 10)
    await lease(queue)  # leased at TTL-10; the claim lapses at TTL+20
    await advance(29)
    assert raw(db)["status"] == "leased"
    await advance(1)  # back to queued, where its TTL has passed
    row = raw(db)
    assert (row["status"], row["completed_at"], row["attempts"]) == (
        "expired", EPOCH + DAY + 20, 0)


async def test_task_ttl_counts_from_not_before(queue: TaskActor, db: Database,
                                               autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue, not_before=EPOCH + HOUR)
    await advance(DAY + HOUR - 1)
    assert raw(db)["status"] == "queued"
    await advance(1)
    assert raw(db)["status"] == "expired"


async def test_not_before_is_honoured_and_a_parked_lease_is_served_exactly_then(
        queue: TaskActor, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue, not_before=EPOCH + 100)
    assert await lease(queue) == []
    await trio.sleep(80)
    assert await lease(queue) == []
    served: list[tuple[float, list[dict[str, Any]]]] = []

    async def waiter() -> None:
        got = await parked(queue,
            LeaseTasks("w1", wait=True), deadline=trio.current_time() + 30,
            give_back=release_message, on_timeout=())
        served.append((elapsed(clock), got))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
    [(when, got)] = served
    assert when == 100 and [g["task_id"] for g in got] == ["t1"]


async def test_priority_then_oldest(queue: TaskActor,
                                    autojump_clock: trio.testing.MockClock) -> None:
    for task_id, site, priority in (("low", "s1", 0), ("high-old", "s2", 5),
                                    ("high-new", "s3", 5), ("mid", "s4", 3)):
        await submit(queue, task_id, site=site, priority=priority)
        await trio.sleep(1)
    order = [(await lease_one(queue))["task_id"] for _ in range(4)]
    assert order == ["high-old", "high-new", "mid", "low"]


async def test_priority_within_a_lane(queue: TaskActor) -> None:
    await submit(queue, "first")
    await submit(queue, "urgent", priority=9)
    got = await lease_one(queue)
    assert got["task_id"] == "urgent"
    assert await lease(queue, "w2") == []  # one in flight per lane
    await start(queue, got)
    await report(queue, got)
    assert (await lease_one(queue, "w2"))["task_id"] == "first"


async def test_max_ten_hands_out_distinct_lanes(queue: TaskActor) -> None:
    for lane in range(12):
        for n in range(2):
            await submit(queue, f"t{lane}-{n}", site="shop", account=f"a{lane:02d}")
    first = await lease(queue, max=10)
    assert len(first) == 10
    assert len({g["account"] for g in first}) == 10
    assert all(g["task_id"].endswith("-0") for g in first)
    second = await lease(queue, "w2", max=10)
    assert sorted(g["account"] for g in second) == ["a10", "a11"]
    assert await lease(queue, "w3", max=10) == []


async def test_sites_filter(queue: TaskActor) -> None:
    await submit(queue, "a", site="s1")
    await submit(queue, "b", site="s2")
    assert await lease(queue, sites=()) == []
    assert [g["task_id"] for g in await lease(queue, sites=("s2", "s9"), max=5)] == ["b"]


async def test_two_workers_leasing_one_lane_at_once(queue: TaskActor) -> None:
    await submit(queue, "a1", account="a")
    await submit(queue, "a2", account="a")
    await submit(queue, "b1", account="b")
    got: dict[str, list[dict[str, Any]]] = {}

    async def worker(name: str) -> None:
        got[name] = await lease(queue, name)

    commits = queue.statistics().commits
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker, "w1")
        nursery.start_soon(worker, "w2")
    assert queue.statistics().commits == commits + 1  # both in one transaction
    assert sorted(g["task_id"] for name in got for g in got[name]) == ["a1", "b1"]
    # Only one lane left free for nobody: a third lease gets nothing.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker, "w3")
        nursery.start_soon(worker, "w4")
    assert got["w3"] == got["w4"] == []


async def test_the_database_refuses_a_second_task_in_flight_on_a_lane(
        queue: TaskActor, db: Database) -> None:
    await submit(queue, "a1")
    await submit(queue, "a2")
    await submit(queue, "other", account="x")
    await lease(queue)

    def force(conn: sqlite3.Connection, status: str) -> None:
        conn.execute("UPDATE tasks SET status = ?, lease_owner = 'rogue', lease_token = 'x', "
                     "claim_expires_at = 1, lease_expires_at = 1, started_at = 1 "
                     "WHERE task_id = 'a2'", (status,))

    for status in ("leased", "running", "stale"):
        with pytest.raises(sqlite3.IntegrityError):
            db.run_sync(functools.partial(force, status=status))

    def duplicate(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO tasks (task_id, tenant, site, account, kind, params, "
                     "fingerprint, status, lease_owner, lease_token, created_at, updated_at) "
                     "SELECT 'copy', tenant, site, account, kind, params, fingerprint, "
                     "'stale', 'rogue', 'y', created_at, updated_at FROM tasks "
                     "WHERE task_id = 'a1'")

    with pytest.raises(sqlite3.IntegrityError):
        db.run_sync(duplicate)
    db.run_sync(lambda conn: force(conn, "succeeded"))  # out of flight: allowed
    assert (await get(queue, "a2"))["status"] == "succeeded"


# ---- cancel -----------------------------------------------------------------------------

async def test_cancel_queued_and_terminal(queue: TaskActor) -> None:
    await submit(queue)
    canceled = await ask(queue, ControlTask("t1", "cancel", "ten1"))
    assert (canceled["status"], canceled["completed_at"]) == ("canceled", at(0))
    with pytest.raises(StateConflict):
        await ask(queue, ControlTask("t1", "cancel"))
    assert await lease(queue) == []


async def test_cancel_while_leased_fences_off_the_start(
        queue: TaskActor, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    await submit(queue, "t2")
    got = await lease_one(queue)
    canceled = await ask(queue, ControlTask("t1", "cancel"))
    assert (canceled["status"], canceled["lease_owner"], canceled["attempts"]) == (
        "canceled", None, 0)
    with pytest.raises(TaskLeaseInvalid):
        await start(queue, got)
    assert (await lease_one(queue, "w2"))["task_id"] == "t2"  # the lane was freed


async def test_cancel_while_running_asks_the_worker(queue: TaskActor) -> None:
    got = await running(queue)
    requested = await ask(queue, ControlTask("t1", "cancel"))
    assert (requested["status"], requested["cancel_requested"]) == ("running", True)
    assert (await renew(queue, got))["cancel_requested"] is True
    done = await report(queue, got, "canceled", error_message="stopped before paying")
    assert (done["status"], done["error"]) == (
        "canceled", {"code": None, "message": "stopped before paying", "type": None,
                     "traceback": None})


async def test_cancel_of_a_stale_task_is_a_conflict(
        queue: TaskActor, autojump_clock: trio.testing.MockClock) -> None:
    await running(queue)
    await trio.sleep(120)
    with pytest.raises(StateConflict):
        await ask(queue, ControlTask("t1", "cancel"))


# ---- reclaim ----------------------------------------------------------------------------

async def test_reclaim_only_for_stale_tasks(queue: TaskActor) -> None:
    await running(queue)
    with pytest.raises(StateConflict):
        await ask(queue, ReclaimTask("t1", "requeue", "looks stuck", "admin"))
    with pytest.raises(TaskNotFound):
        await ask(queue, ReclaimTask("nope", "requeue", "r", "admin"))


async def test_reclaim_requeue(queue: TaskActor, db: Database,
                               autojump_clock: trio.testing.MockClock,
                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="leasegate.tasks")
    old = await running(queue)
    await trio.sleep(120)
    with pytest.raises(InvalidRequest):
        await ask(queue, ReclaimTask("t1", "retry", "r", "admin"))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await ask(queue, ReclaimTask("t1", "requeue", "r", "admin", result={"x": 1}))
    back = await ask(queue, ReclaimTask("t1", "requeue", "order not on the site", "key-admin"))
    assert (back["status"], back["lease_owner"], back["attempts"]) == ("queued", None, 1)
    assert back["reclaim"] == {"action": "requeue", "reason": "order not on the site",
                               "by": "key-admin", "at": at(120)}
    assert raw(db)["expires_at"] == EPOCH + 120 + DAY  # the TTL clock restarts
    assert any("task reclaimed: task_id=t1 action=requeue" in r.getMessage()
               for r in caplog.records)
    new = await lease_one(queue, "w2")
    assert new["attempt"] == 2 and new["lease_token"] != old["lease_token"]
    with pytest.raises(TaskLeaseInvalid):  # the old lease is dead for good
        await report(queue, old)
    await start(queue, new, "w2")
    assert (await get(queue))["attempts"] == 2


@pytest.mark.parametrize("action", ["succeeded", "failed"])
async def test_reclaim_to_a_final_state(queue: TaskActor, action: ReclaimAction,
                                        autojump_clock: trio.testing.MockClock) -> None:
    got = await running(queue, max_cost=100)
    await submit(queue, "t2")
    await trio.sleep(120)
    done = await ask(queue, ReclaimTask("t1", action, "checked on the site", "key-admin",
                                        result={"order": "o-5"}, cost=40))
    assert (done["status"], done["completed_at"], done["result"]) == (
        action, at(120), {"order": "o-5"})
    # The queue knows max_cost only; what was charged is the ledger's (test_ledger.py).
    assert done["billing"] == {"max_cost": 100, "charged": None, "refunded": None,
                               "hold_status": None}
    if action == "failed":
        assert done["error"]["message"] == "reclaimed as failed by key-admin: checked on the site"
    with pytest.raises(TaskLeaseInvalid):  # a late result after the operator decided
        await report(queue, got)
    assert (await lease_one(queue, "w2"))["task_id"] == "t2"


async def test_reclaim_requeue_honours_a_pending_cancel(
        queue: TaskActor, autojump_clock: trio.testing.MockClock) -> None:
    await running(queue)
    await ask(queue, ControlTask("t1", "cancel"))
    await trio.sleep(120)
    done = await ask(queue, ReclaimTask("t1", "requeue", "worker died", "admin"))
    assert (done["status"], done["reclaim"]["action"]) == ("canceled", "requeue")


# ---- pause and resume (batch tasks) -------------------------------------------------------

async def test_pause_and_resume_a_queued_batch_task(queue: TaskActor,
                                                    autojump_clock: trio.testing.MockClock,
                                                    db: Database) -> None:
    await submit(queue, "plain")
    with pytest.raises(StateConflict):  # not a batch task
        await ask(queue, ControlTask("plain", "pause"))
    await submit(queue, batch_total=10, account="b")
    paused = await ask(queue, ControlTask("t1", "pause", "ten1"))
    assert paused["status"] == "paused"
    assert (await ask(queue, ControlTask("t1", "pause")))["status"] == "paused"  # idempotent
    assert [g["task_id"] for g in await lease(queue, max=5)] == ["plain"]
    await advance(DAY - 60)  # paused for less than task_ttl (then it would expire)
    assert raw(db)["status"] == "paused"
    resumed = await ask(queue, ControlTask("t1", "resume"))
    assert resumed["status"] == "queued"
    assert raw(db)["expires_at"] == EPOCH + 2 * DAY - 60  # the TTL clock restarts
    assert "t1" in [g["task_id"] for g in await lease(queue, max=5)]


async def test_pause_and_resume_of_finished_tasks_conflict(queue: TaskActor) -> None:
    got = await running(queue, batch_total=1)
    await report(queue, got)
    with pytest.raises(StateConflict):
        await ask(queue, ControlTask("t1", "pause"))
    with pytest.raises(StateConflict):
        await ask(queue, ControlTask("t1", "resume"))


async def test_pause_a_running_batch_task_hands_the_checkpoint_on(
        queue: TaskActor) -> None:
    got = await running(queue, batch_total=100)
    await submit(queue, "t2")
    flagged = await ask(queue, ControlTask("t1", "pause"))
    assert (flagged["status"], flagged["pause_requested"]) == ("running", True)
    assert (await renew(queue, got, progress={"done": 40}))["pause_requested"] is True
    paused = await report(queue, got, "paused", progress={"done": 42}, cost=42)
    assert (paused["status"], paused["progress"], paused["pause_requested"]) == (
        "paused", {"done": 42}, False)
    assert paused["completed_at"] is None
    # The lane is released while paused.
    assert (await lease_one(queue, "w2"))["task_id"] == "t2"
    assert await report(queue, got, "paused", progress={"done": 42}, cost=42) == paused  # retry
    await ask(queue, ControlTask("t1", "resume"))
    # t2 holds the lane now; once it is gone the resumed task comes with its checkpoint.
    assert await lease(queue, "w3") == []
    await ask(queue, ControlTask("t2", "cancel"))
    resumed = await lease_one(queue, "w3")
    assert (resumed["task_id"], resumed["progress"], resumed["attempt"]) == (
        "t1", {"done": 42}, 2)


async def test_a_pause_reported_while_a_cancel_is_pending_ends_canceled(
        queue: TaskActor) -> None:
    got = await running(queue, batch_total=10)
    await ask(queue, ControlTask("t1", "cancel"))
    done = await report(queue, got, "paused", progress={"done": 4}, cost=4)
    assert (done["status"], done["progress"], done["completed_at"]) == (
        "canceled", {"done": 4}, at(0))
    assert await report(queue, got, "paused", progress={"done": 4}, cost=4) == done  # retry


async def test_pause_requested_while_leased_is_honoured_at_claim_expiry(
        queue: TaskActor, db: Database, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue, batch_total=3)
    await lease(queue)
    assert (await ask(queue, ControlTask("t1", "pause")))["pause_requested"] is True
    await advance(30)
    row = raw(db)
    assert (row["status"], row["pause_requested"], row["attempts"]) == ("paused", 0, 0)


async def test_resume_withdraws_a_pause_request(queue: TaskActor) -> None:
    got = await running(queue, batch_total=3)
    await ask(queue, ControlTask("t1", "pause"))
    resumed = await ask(queue, ControlTask("t1", "resume"))
    assert (resumed["status"], resumed["pause_requested"]) == ("running", False)
    assert (await renew(queue, got))["pause_requested"] is False
    await report(queue, got)
    with pytest.raises(StateConflict):
        await ask(queue, ControlTask("t1", "resume"))


# ---- long-polls ----------------------------------------------------------------------------

async def test_parked_lease_is_served_when_a_lane_frees(
        queue: TaskActor, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    got = await running(queue)
    await submit(queue, "t2")
    served: list[tuple[float, list[str]]] = []

    async def waiter() -> None:
        leases = await parked(queue,
            LeaseTasks("w2", wait=True), deadline=trio.current_time() + 30,
            give_back=release_message, on_timeout=())
        served.append((elapsed(clock), [g["task_id"] for g in leases]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(7)
        await report(queue, got)
    assert served == [(7, ["t2"])]


async def test_caller_gone_at_hand_off_loses_nothing(
        queue: TaskActor, autojump_clock: trio.testing.MockClock) -> None:
    """Cancel a parked long-poll at every point around the hand-off: the task is
    either delivered to it or back in the queue at once (not after the claim window)."""
    async def clear() -> None:
        for g in await lease(queue, "cleanup", max=10):
            await ask(queue, ControlTask(g["task_id"], "cancel"))

    await assert_none_lost_at_hand_off(
        queue, LeaseTasks("w1", wait=True), give_back=release_message, prefix="t",
        submit=functools.partial(submit, queue), read=functools.partial(get, queue),
        clear=clear)


async def test_drain_answers_parked_leases_and_refuses_new_ones(
        queue: TaskActor, autojump_clock: trio.testing.MockClock) -> None:
    results: list[Any] = []

    async def waiter() -> None:
        results.append(await parked(queue,
            LeaseTasks("w1", wait=True), deadline=trio.current_time() + 30,
            give_back=release_message, on_timeout="timeout"))

    start_time = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        queue.drain()
    assert results == [[]] and trio.current_time() == start_time
    with pytest.raises(Unavailable):
        await lease(queue)


# ---- workers, health, retention --------------------------------------------------------------

async def test_worker_presence(queue: TaskActor,
                               autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue, "a", site="s1")
    got = await lease_one(queue, "w1", sites=("s1", "s2"))
    await lease(queue, "w2")
    await trio.sleep(20)
    await start(queue, got)
    page = await ask(queue, ListWorkers())
    assert page == {"items": [
        {"worker_id": "w1", "state": "online", "last_seen_at": at(20), "task_ids": ["a"],
         "sites": ["s1", "s2"], "channels": ["tasks"]},
        {"worker_id": "w2", "state": "online", "last_seen_at": at(0), "task_ids": [],
         "sites": None, "channels": ["tasks"]},
    ], "total": 2, "limit": 50, "offset": 0}
    await trio.sleep(70)  # w2 last seen exactly 90 s ago
    states = {w["worker_id"]: w["state"] for w in (await ask(queue, ListWorkers()))["items"]}
    assert states == {"w1": "online", "w2": "offline"}
    await ask(queue, ListTasks())  # reads are not heartbeats
    await renew(queue, got)
    items = (await ask(queue, ListWorkers(Page(limit=1))))["items"]
    assert [(w["worker_id"], w["last_seen_at"]) for w in items] == [("w1", at(90))]
    await lease(queue, "w1")  # a lease call without sites: every site
    assert (await ask(queue, ListWorkers()))["items"][0]["sites"] is None


async def health(queue: TaskActor, top: int = 20) -> tuple[list[str], dict[str, int],
                                                            dict[str, Any]]:
    """The unserved sites listed, the queued tasks by site listed, and the whole report."""
    report = await ask(queue, CheckTaskHealth(top))
    return ([site["site"] for site in report["unserved"]],
            {site["site"]: site["queued"] for site in report["busiest"]}, report)


async def test_health(queue: TaskActor, autojump_clock: trio.testing.MockClock) -> None:
    assert await ask(queue, CheckTaskHealth(20)) == {
        "stale": 0, "blocked_lanes": [], "queued": 0, "queued_sites": 0, "unserved_sites": 0,
        "busiest": [], "unserved": []}
    await submit(queue, "a", site="s1")
    await submit(queue, "b", site="s2")
    await submit(queue, "c", site="s2", account="x")
    assert (await health(queue))[:2] == (["s2", "s1"], {"s2": 2, "s1": 1})  # most first
    await start(queue, await lease_one(queue, "w1", sites=("s1",)))
    await lease(queue, "w-other", sites=("s9",))
    assert (await health(queue))[:2] == (["s2"], {"s2": 2})
    await trio.sleep(10)
    assert (await lease_one(queue, "w-all"))["task_id"] == "b"  # serves every site
    unserved, queued, report = await health(queue)
    assert (unserved, queued, report["unserved_sites"]) == ([], {"s2": 1}, 0)
    assert report["busiest"] == [{"site": "s2", "queued": 1, "served": True}]
    await trio.sleep(90)  # w-all is offline now, and its claim on b lapsed
    assert (await health(queue))[:2] == (["s2"], {"s2": 2})
    await trio.sleep(20)
    assert await ask(queue, CheckTaskHealth(20)) == {
        "stale": 1, "queued": 2, "queued_sites": 1, "unserved_sites": 1,
        "busiest": [{"site": "s2", "queued": 2, "served": False}],
        "unserved": [{"site": "s2", "queued": 2, "served": False}],
        "blocked_lanes": [{"site": "s1", "account": "-", "task_id": "a", "since": at(120)}]}
    # Counts only, unless lanes and sites are asked for; never more than asked for.
    assert (await ask(queue, CheckTaskHealth()))["unserved"] == []
    for n in range(5):
        await submit(queue, f"more-{n}", site=f"s-{n}")
    unserved, queued, report = await health(queue, top=3)
    assert unserved == ["s2", "s-0", "s-1"] and report["unserved_sites"] == 6
    assert queued == {"s2": 2, "s-0": 1, "s-1": 1} and report["queued"] == 7


async def test_retention_purge(queue: TaskActor, db: Database,
                               autojump_clock: trio.testing.MockClock) -> None:
    got = await running(queue)
    await report(queue, got)
    stale = await running(queue, "t2", account="x", worker="w2")
    await trio.sleep(7 * DAY - 1)
    assert (await get(queue))["status"] == "succeeded"
    await trio.sleep(61)  # the purge job runs every minute
    with pytest.raises(TaskNotFound):
        await get(queue)
    assert (await get(queue, "t2"))["status"] == "stale"  # never purged while unresolved
    assert any(job.name == "purge_tasks" and job.runs > 0 for job in queue.statistics().jobs)
    workers = {w["worker_id"] for w in (await ask(queue, ListWorkers()))["items"]}
    assert workers == {"w2"}  # w1 forgotten; w2 still holds the stale task
    assert stale["task_id"] == "t2"


async def test_runs_on_a_database_thread(nursery: trio.Nursery, tmp_path: Path, clock: Clock,
                                         settings: Settings,
                                         autojump_clock: trio.testing.MockClock) -> None:
    """Every hook runs on the connection's own thread (as served): no clock reads there."""
    autojump_clock.autojump_threshold = 0.1  # the clock must not jump while SQLite works
    db = open_db(tmp_path / "threaded.db", inline=False)
    try:
        actor = open_tasks(db, clock, settings)
        await nursery.start(actor.run)
        await submit(actor, "t1")
        await submit(actor, "later", account="x", not_before=EPOCH + 5)
        got = await lease_one(actor)
        await start(actor, got)
        await renew(actor, got, progress={"n": 1})
        served = await parked(actor,
            LeaseTasks("w2", wait=True), deadline=trio.current_time() + 30,
            give_back=release_message, on_timeout=())
        assert [g["task_id"] for g in served] == ["later"]
        await trio.sleep(60)  # the claim on "later" lapses on a timer turn
        assert (await get(actor, "later"))["status"] == "queued"
        assert (await report(actor, got))["status"] == "succeeded"
        assert (await ask(actor, CheckTaskHealth()))["queued"] == 1
        assert (await ask(actor, ListWorkers()))["total"] == 2
        actor.close()
    finally:
        db.close()


async def test_a_start_retry_tells_of_a_cancel_that_came_meanwhile(queue: TaskActor) -> None:
    """The first start's reply was lost, the client canceled (running: only a request);
    the retry must say so before the worker touches the site."""
    await submit(queue, "t1")
    got = await lease_one(queue)
    await start(queue, got)
    await queue.ref.ask(ControlTask("t1", "cancel"))
    again = await start(queue, got)
    assert (again["status"], again["cancel_requested"]) == ("running", True)
