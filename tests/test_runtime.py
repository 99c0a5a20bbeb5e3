"""The actor runtime: group commit, savepoints, timers, failure policy."""

from __future__ import annotations

import functools
import gc
import logging
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.actors.runtime.actor import Actor, Inbox
from leasegate.actors.runtime.handlers import Handlers, Waiting
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.runtime.turn import Turn
from leasegate.actors.runtime.waiters import NOT_YET, NotYet
from leasegate.clock import Clock
from leasegate.errors import InternalError, LeasegateError, StateConflict, Unavailable
from leasegate.storage.connection import Database
from tests.conftest import EPOCH, started


class Toy:
    """Tags the toy actor's messages."""


@dataclass(frozen=True)
class Add(Ask[Toy, str]):
    name: str
    fail: bool = False
    crash: bool = False  # a bug after writing


@dataclass(frozen=True)
class Count(Ask[Toy, int]):
    pass


@dataclass(frozen=True)
class WaitFor(Ask[Toy, str]):
    name: str


class ToyTurn(Turn):
    """A toy actor's state: a table, a deadline and a periodic job."""

    def __init__(self) -> None:
        super().__init__("toy")
        self.wakeups: list[float] = []
        self.job_calls = 0
        self.job_fails = False
        self.job_writes = False
        self.deadlines: list[float] = []
        self.wakeup_crashes = False


TOY = Handlers(Toy, ToyTurn)


@TOY.on(Add)
def add(turn: ToyTurn, m: Add) -> str:
    turn.conn.execute("INSERT INTO names VALUES (?)", (m.name,))
    if m.fail:
        raise StateConflict("refused after writing")
    if m.crash:
        raise RuntimeError("a bug")
    turn.work_may_be_available()
    return m.name


@TOY.on(Count)
def count(turn: ToyTurn, m: Count) -> int:
    found: int = turn.conn.execute("SELECT count(*) FROM names").fetchone()[0]
    return found


def found(turn: ToyTurn, m: WaitFor) -> str | None:
    row = turn.conn.execute("SELECT name FROM names WHERE name = ?", (m.name,)).fetchone()
    return None if row is None else str(row[0])


def shutting_down(turn: ToyTurn, m: WaitFor) -> str:
    raise Unavailable("the gateway is shutting down")


@TOY.may_wait(WaitFor, Waiting(wait=lambda m: None, serve=found, drained=shutting_down))
def wait_for(turn: ToyTurn, m: WaitFor) -> str | NotYet:
    return found(turn, m) or NOT_YET


def start(turn: ToyTurn) -> None:
    turn.conn.execute("CREATE TABLE IF NOT EXISTS names (name TEXT PRIMARY KEY)")


def next_wakeup(turn: ToyTurn) -> float | None:
    future = [d for d in turn.deadlines if d > turn.now]
    return min(future) if future else None


def on_wakeup(turn: ToyTurn, now: float) -> None:
    if turn.wakeup_crashes:
        raise RuntimeError("a bug in a deadline")
    if any(d <= now for d in turn.deadlines):
        turn.wakeups.append(now - EPOCH)
        turn.deadlines = [d for d in turn.deadlines if d > now]


TOY.on_start(start)
TOY.deadlines(next_wakeup, on_wakeup)


def tick(turn: ToyTurn, now: float) -> None:
    turn.job_calls += 1
    if turn.job_fails:
        raise ValueError("job broke")
    if turn.job_writes:
        turn.conn.execute("INSERT INTO names VALUES (?)",
                          (f"job-{turn.job_calls}" + "x" * 5000,))


ToyActor = Actor[Toy, ToyTurn]


def open_toy(db: Database, clock: Clock, **kw: Any) -> ToyActor:
    actor = Actor("toy", Inbox(Toy), db, clock, ToyTurn(), TOY, **kw)
    actor.add_job("tick", 10.0, tick)
    return actor


@pytest.fixture
async def toy(nursery: trio.Nursery, db: Database, clock: Clock) -> ToyActor:
    return await started(nursery, open_toy(db, clock, error_log_window=600))


async def test_waiting_messages_share_one_commit(toy: ToyActor) -> None:
    before = toy.statistics().commits

    async def add(name: str) -> None:
        await toy.ref.ask(Add(name))

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(add, f"n{i}")
    assert await toy.ref.ask(Count()) == 50
    assert toy.statistics().commits - before <= 3  # 50 callers, a handful of transactions


async def added_together(toy: ToyActor, *messages: Add) -> dict[str, object]:
    """Each message's reply, or the error it was answered with, by name; all sent at once
    (one group commit)."""
    results: dict[str, object] = {}

    async def add(message: Add) -> None:
        try:
            results[message.name] = await toy.ref.ask(message)
        except LeasegateError as exc:
            results[message.name] = exc

    async with trio.open_nursery() as nursery:
        for message in messages:
            nursery.start_soon(add, message)
    return results


async def test_a_refused_message_rolls_back_alone(toy: ToyActor) -> None:
    results = await added_together(toy, Add("a"), Add("b", fail=True), Add("c"))
    assert results["a"] == "a" and results["c"] == "c"
    assert isinstance(results["b"], StateConflict) and results["b"].code == 6003
    assert await toy.ref.ask(Count()) == 2


async def test_parked_message_is_answered_when_work_appears(
        toy: ToyActor, autojump_clock: trio.testing.MockClock) -> None:
    got: list[Any] = []

    async def wait() -> None:
        got.append(await toy.ref.ask_until(WaitFor("x"), deadline=trio.current_time() + 9,
                                                give_back=lambda _: None, on_timeout="late"))

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(2)
        await toy.ref.ask(Add("x"))
    assert got == ["x"] and trio.current_time() - start == 2


async def test_timer_wakes_exactly_at_the_deadline(
        toy: ToyActor, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    toy.turn.deadlines = [EPOCH + 3.25, EPOCH + 7.5]
    await toy.ref.ask(Count())  # a turn recomputes the next wake-up
    await trio.sleep(8)
    assert toy.turn.wakeups == [3.25, 7.5]


async def test_failing_job_is_logged_once_per_window_and_retried(
        toy: ToyActor, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    toy.turn.job_fails = True
    with caplog.at_level(logging.WARNING, logger="leasegate.jobs"):
        await trio.sleep(10 * 120 + 1)  # 120 runs of a 10 s job
    [job] = toy.statistics().jobs
    assert toy.turn.job_calls == 120 and job.failures == 120 and job.runs == 0
    reports = [r for r in caplog.records if "periodic job tick failed" in r.getMessage()]
    assert len(reports) == 2  # at 10 s and at 610 s: one per 600 s window
    assert "ValueError: job broke" in reports[0].getMessage()
    assert "(60 times since the last report)" in reports[1].getMessage()
    toy.turn.job_fails = False
    await trio.sleep(10)
    [job] = toy.statistics().jobs
    assert job.runs == 1
    assert await toy.ref.ask(Count()) == 0  # the actor kept serving


async def test_a_bug_in_one_message_fails_that_message_alone(
        toy: ToyActor, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="leasegate.actors"):
        results = await added_together(toy, Add("a"), Add("b", crash=True), Add("c"))
    assert results["a"] == "a" and results["c"] == "c"
    failed = results["b"]
    assert isinstance(failed, InternalError) and (failed.code, failed.status) == (5000, 500)
    assert await toy.ref.ask(Count()) == 2  # b's insert was rolled back
    assert await toy.ref.ask(Add("d")) == "d"  # and the actor serves on
    [report] = [r for r in caplog.records if "unexpected error handling Add" in r.getMessage()]
    assert "RuntimeError: a bug" in report.getMessage()
    assert toy.statistics().internal_errors == 1


async def test_a_bug_outside_message_handling_ends_the_whole_system(
        db: Database, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    actor = open_toy(db, clock)
    actor.turn.wakeup_crashes = True
    actor.turn.deadlines = [EPOCH + 1]
    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="a bug in a deadline"),
                            flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            await actor.ref.ask(Count())  # the turn that schedules the deadline
            await trio.sleep_forever()


def cap_storage(db: Database) -> None:
    """Make every further write fail with SQLITE_FULL (a full disk, for tests)."""
    pages = db.run_sync(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    db.run_sync(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))


def uncap_storage(db: Database) -> None:
    db.run_sync(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))


async def test_storage_failure_answers_every_caller_503(toy: ToyActor, db: Database) -> None:
    cap_storage(db)
    errors: list[Exception] = []

    async def add(name: str) -> None:
        try:
            await toy.ref.ask(Add(name * 5000))
        except Exception as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for name in "abc":
            nursery.start_soon(add, name)
    assert [getattr(e, "code", repr(e)) for e in errors] == [5030, 5030, 5030]
    uncap_storage(db)
    assert await toy.ref.ask(Add("d" * 5000)) == "d" * 5000


async def test_storage_failure_in_a_job_backs_off_and_recovers(
        db: Database, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    writer = open_toy(db, clock)
    writer.turn.job_writes = True
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        cap_storage(db)
        await trio.sleep(30)
        [job] = writer.jobs
        # First try at 10 s, then once a second: not a tight loop, not a crash.
        assert 18 <= writer.turn.job_calls <= 22 and job.record.runs == 0
        uncap_storage(db)
        await trio.sleep(1)
        assert job.record.runs == 1
        await trio.sleep(10)
        assert job.record.runs == 2  # back to its interval
        nursery.cancel_scope.cancel()


async def test_parked_waiters_time_out_at_their_own_deadlines_with_no_turn(
        toy: ToyActor, autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    timed_out: dict[str, float] = {}

    async def wait(name: str, seconds: float) -> None:
        got = await toy.ref.ask_until(WaitFor(name), deadline=start + seconds,
                                           give_back=lambda _: None, on_timeout="late")
        assert got == "late"
        timed_out[name] = trio.current_time() - start

    async with trio.open_nursery() as nursery:
        for i, seconds in enumerate((3.0, 1.5, 4.25, 1.5)):
            nursery.start_soon(wait, f"w{i}", seconds)
        await trio.testing.wait_all_tasks_blocked()
        assert len(toy._waiters) == 4
        commits = toy.statistics().commits  # the turn that parked them is behind
    assert timed_out == {"w0": 3.0, "w1": 1.5, "w2": 4.25, "w3": 1.5}
    assert len(toy._waiters) == 0
    assert toy.statistics().commits == commits  # the actor's clock did it, no transaction


async def test_callers_gone_early_leave_no_timers_behind(
        toy: ToyActor, autojump_clock: trio.testing.MockClock) -> None:
    for _ in range(20):  # each round parks 50 and cancels them all
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(functools.partial(
                    toy.ref.ask_until, WaitFor(f"w{i}"),
                    deadline=trio.current_time() + 30, give_back=lambda _: None,
                    on_timeout=None))
            await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    assert len(toy._waiters) == 0
    assert len(toy._waiters._deadlines) <= 2 * 50 + 64


async def test_a_parked_waiter_holds_little_memory(toy: ToyActor) -> None:
    """What the mailbox and the actor keep per parked long-poll: the envelope, the
    reply slot, the waiters' entries, the waiting coroutine (no channel and no
    cancel scope each)."""
    n = 200

    async def wait(i: int) -> None:
        await toy.ref.ask_until(WaitFor(f"w{i}"), deadline=trio.current_time() + 30,
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
            assert len(toy._waiters) == n
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        nursery.cancel_scope.cancel()
    ours = [tracemalloc.Filter(True, "*/leasegate/actors/*", all_frames=True)]
    grown = sum(stat.size_diff for stat in after.filter_traces(ours).compare_to(
        before.filter_traces(ours), "filename"))
    # ~1.4 KiB today (here each waiter has a queue of its own); a memory
    # channel and a cancel scope per waiter, as before, made it ~3.9 KiB.
    assert grown / n < 2000


def test_a_handler_takes_the_message_it_is_registered_for() -> None:
    """What mypy cannot tie (the handler's message parameter to the registered type)
    is checked once, when the handler is registered: at import."""
    toys = Handlers(Toy, ToyTurn)
    with pytest.raises(TypeError, match="registered for Count but takes"):
        @toys.on(Count)
        def count(turn: ToyTurn, m: Add) -> int:
            raise NotImplementedError

    @toys.on(Count)
    def count_names(turn: ToyTurn, m: Count) -> int:
        raise NotImplementedError

    with pytest.raises(TypeError, match="Count has a handler already"):
        toys.on(Count)(count_names)
