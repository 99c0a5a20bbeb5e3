"""The actor runtime: group commit, savepoints, timers, failure policy."""

from __future__ import annotations

import functools
import gc
import logging
import sqlite3
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.actors.legacy_runtime import PARK, Actor
from leasegate.actors.mailbox import Ask, Tell
from leasegate.clock import Clock
from leasegate.errors import InternalError, StateConflict
from leasegate.storage.connection import Database
from tests.conftest import EPOCH


@dataclass(frozen=True)
class Add(Ask[str]):
    name: str
    fail: bool = False
    crash: bool = False  # a bug after writing


@dataclass(frozen=True)
class Count(Ask[int]):
    pass


@dataclass(frozen=True)
class WaitFor(Ask[str]):
    name: str


class Ledger(Actor):
    """A toy actor with a table, a deadline and a periodic job."""

    name = "toy"

    def __init__(self, db: Database, clock: Clock, **kw: Any) -> None:
        super().__init__(db, clock, **kw)
        self.wakeups: list[float] = []
        self.job_calls = 0
        self.job_fails = False
        self.add_job("tick", 10.0, self._tick)
        self.deadlines: list[float] = []
        self.wakeup_crashes = False

    def on_start(self, conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS names (name TEXT PRIMARY KEY)")

    def handle(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        match message:
            case Add():
                conn.execute("INSERT INTO names VALUES (?)", (message.name,))
                if message.fail:
                    raise StateConflict("refused after writing")
                if message.crash:
                    raise RuntimeError("a bug")
                self.work_may_be_available()
                return message.name
            case Count():
                return conn.execute("SELECT count(*) FROM names").fetchone()[0]
            case WaitFor():
                return self.serve_parked(conn, message) or PARK
        raise TypeError(message)

    def serve_parked(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        assert isinstance(message, WaitFor)
        row = conn.execute("SELECT name FROM names WHERE name = ?", (message.name,)).fetchone()
        return None if row is None else row[0]

    def next_wakeup(self, conn: sqlite3.Connection) -> float | None:
        future = [d for d in self.deadlines if d > self.now]
        return min(future) if future else None

    def on_wakeup(self, conn: sqlite3.Connection, now: float) -> None:
        if self.wakeup_crashes:
            raise RuntimeError("a bug in a deadline")
        if any(d <= now for d in self.deadlines):
            self.wakeups.append(now - EPOCH)
            self.deadlines = [d for d in self.deadlines if d > now]

    def _tick(self, conn: sqlite3.Connection, now: float) -> None:
        self.job_calls += 1
        if self.job_fails:
            raise ValueError("job broke")


@pytest.fixture
async def toy(nursery: trio.Nursery, db: Database, clock: Clock) -> Ledger:
    actor = Ledger(db, clock, error_log_window=600)
    await nursery.start(actor.run)
    return actor


async def test_waiting_messages_share_one_commit(toy: Ledger) -> None:
    before = toy.statistics().commits

    async def add(name: str) -> None:
        await toy.mailbox.ask(Add(name))

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(add, f"n{i}")
    assert await toy.mailbox.ask(Count()) == 50
    assert toy.statistics().commits - before <= 3  # 50 callers, a handful of transactions


async def test_a_refused_message_rolls_back_alone(toy: Ledger) -> None:
    results: dict[str, Any] = {}

    async def add(message: Add) -> None:
        try:
            results[message.name] = await toy.mailbox.ask(message)
        except StateConflict as exc:
            results[message.name] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(add, Add("a"))
        nursery.start_soon(add, Add("b", fail=True))
        nursery.start_soon(add, Add("c"))
    assert results["a"] == "a" and results["c"] == "c"
    assert isinstance(results["b"], StateConflict) and results["b"].code == 6003
    assert await toy.mailbox.ask(Count()) == 2


async def test_parked_message_is_answered_when_work_appears(
        toy: Ledger, autojump_clock: trio.testing.MockClock) -> None:
    got: list[Any] = []

    async def wait() -> None:
        got.append(await toy.mailbox.ask_parked(WaitFor("x"), deadline=trio.current_time() + 9,
                                                give_back=lambda _: None, on_timeout="late"))

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(2)
        await toy.mailbox.ask(Add("x"))
    assert got == ["x"] and trio.current_time() - start == 2


async def test_timer_wakes_exactly_at_the_deadline(
        toy: Ledger, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    toy.deadlines = [EPOCH + 3.25, EPOCH + 7.5]
    await toy.mailbox.ask(Count())  # a turn recomputes the next wake-up
    await trio.sleep(8)
    assert toy.wakeups == [3.25, 7.5]


async def test_failing_job_is_logged_once_per_window_and_retried(
        toy: Ledger, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    toy.job_fails = True
    with caplog.at_level(logging.WARNING, logger="leasegate.jobs"):
        await trio.sleep(10 * 120 + 1)  # 120 runs of a 10 s job
    [job] = toy.statistics().jobs
    assert toy.job_calls == 120 and job.failures == 120 and job.runs == 0
    reports = [r for r in caplog.records if "periodic job tick failed" in r.getMessage()]
    assert len(reports) == 2  # at 10 s and at 610 s: one per 600 s window
    assert "ValueError: job broke" in reports[0].getMessage()
    assert "(60 times since the last report)" in reports[1].getMessage()
    toy.job_fails = False
    await trio.sleep(10)
    [job] = toy.statistics().jobs
    assert job.runs == 1
    assert await toy.mailbox.ask(Count()) == 0  # the actor kept serving


async def test_a_bug_in_one_message_fails_that_message_alone(
        toy: Ledger, caplog: pytest.LogCaptureFixture) -> None:
    results: dict[str, object] = {}

    async def add(message: Add) -> None:
        try:
            results[message.name] = await toy.mailbox.ask(message)
        except InternalError as exc:
            results[message.name] = exc

    with caplog.at_level(logging.ERROR, logger="leasegate.actors"):
        async with trio.open_nursery() as nursery:  # one group commit
            nursery.start_soon(add, Add("a"))
            nursery.start_soon(add, Add("b", crash=True))
            nursery.start_soon(add, Add("c"))
    assert results["a"] == "a" and results["c"] == "c"
    failed = results["b"]
    assert isinstance(failed, InternalError) and (failed.code, failed.status) == (5000, 500)
    assert await toy.mailbox.ask(Count()) == 2  # b's insert was rolled back
    assert await toy.mailbox.ask(Add("d")) == "d"  # and the actor serves on
    [report] = [r for r in caplog.records if "unexpected error handling Add" in r.getMessage()]
    assert "RuntimeError: a bug" in report.getMessage()
    assert toy.statistics().internal_errors == 1


async def test_a_bug_outside_message_handling_ends_the_whole_system(
        db: Database, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    actor = Ledger(db, clock)
    actor.wakeup_crashes = True
    actor.deadlines = [EPOCH + 1]
    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="a bug in a deadline"),
                            flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            await actor.mailbox.ask(Count())  # the turn that schedules the deadline
            await trio.sleep_forever()


def cap_storage(db: Database) -> None:
    """Make every further write fail with SQLITE_FULL (a full disk, for tests)."""
    pages = db.run_sync(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    db.run_sync(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))


def uncap_storage(db: Database) -> None:
    db.run_sync(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))


async def test_storage_failure_answers_every_caller_503(toy: Ledger, db: Database) -> None:
    cap_storage(db)
    errors: list[Exception] = []

    async def add(name: str) -> None:
        try:
            await toy.mailbox.ask(Add(name * 5000))
        except Exception as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for name in "abc":
            nursery.start_soon(add, name)
    assert [getattr(e, "code", repr(e)) for e in errors] == [5030, 5030, 5030]
    uncap_storage(db)
    assert await toy.mailbox.ask(Add("d" * 5000)) == "d" * 5000


class Writer(Ledger):
    """A toy whose periodic job writes."""

    def _tick(self, conn: sqlite3.Connection, now: float) -> None:
        self.job_calls += 1
        conn.execute("INSERT INTO names VALUES (?)", (f"job-{self.job_calls}" + "x" * 5000,))


async def test_storage_failure_in_a_job_backs_off_and_recovers(
        db: Database, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    writer = Writer(db, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        cap_storage(db)
        await trio.sleep(30)
        [job] = writer.jobs
        # First try at 10 s, then once a second: not a tight loop, not a crash.
        assert 18 <= writer.job_calls <= 22 and job.record.runs == 0
        uncap_storage(db)
        await trio.sleep(1)
        assert job.record.runs == 1
        await trio.sleep(10)
        assert job.record.runs == 2  # back to its interval
        nursery.cancel_scope.cancel()


async def test_parked_waiters_time_out_at_their_own_deadlines_with_no_turn(
        toy: Ledger, autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    timed_out: dict[str, float] = {}

    async def wait(name: str, seconds: float) -> None:
        got = await toy.mailbox.ask_parked(WaitFor(name), deadline=start + seconds,
                                           give_back=lambda _: None, on_timeout="late")
        assert got == "late"
        timed_out[name] = trio.current_time() - start

    async with trio.open_nursery() as nursery:
        for i, seconds in enumerate((3.0, 1.5, 4.25, 1.5)):
            nursery.start_soon(wait, f"w{i}", seconds)
        await trio.testing.wait_all_tasks_blocked()
        assert len(toy._parking) == 4
        commits = toy.statistics().commits  # the turn that parked them is behind
    assert timed_out == {"w0": 3.0, "w1": 1.5, "w2": 4.25, "w3": 1.5}
    assert len(toy._parking) == 0
    assert toy.statistics().commits == commits  # the actor's clock did it, no transaction


async def test_callers_gone_early_leave_no_timers_behind(
        toy: Ledger, autojump_clock: trio.testing.MockClock) -> None:
    for _ in range(20):  # each round parks 50 and cancels them all
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(functools.partial(
                    toy.mailbox.ask_parked, WaitFor(f"w{i}"),
                    deadline=trio.current_time() + 30, give_back=lambda _: None,
                    on_timeout=None))
            await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    assert len(toy._parking) == 0
    assert len(toy._parking._deadlines) <= 2 * 50 + 64


async def test_a_parked_waiter_holds_little_memory(toy: Ledger) -> None:
    """What the mailbox and the actor keep per parked long-poll: the envelope, the
    reply slot, the parking entries, the waiting coroutine (no channel and no
    cancel scope each)."""
    n = 200

    async def wait(i: int) -> None:
        await toy.mailbox.ask_parked(WaitFor(f"w{i}"), deadline=trio.current_time() + 30,
                                     give_back=lambda _: None, on_timeout=None)

    async with trio.open_nursery() as nursery:
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        tracemalloc.start(25)
        try:
            before = tracemalloc.take_snapshot()
            for i in range(n):
                nursery.start_soon(wait, i)
            await trio.testing.wait_all_tasks_blocked()
            assert len(toy._parking) == n
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        nursery.cancel_scope.cancel()
    ours = [tracemalloc.Filter(True, "*/leasegate/actors/*", all_frames=True)]
    grown = sum(stat.size_diff for stat in after.filter_traces(ours).compare_to(
        before.filter_traces(ours), "filename"))
    # ~1.4 KiB today (here each waiter has a parking queue of its own); a memory
    # channel and a cancel scope per waiter, as before, made it ~3.9 KiB.
    assert grown / n < 2000
