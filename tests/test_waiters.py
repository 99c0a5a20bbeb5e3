"""Parked long-polls: a caller that leaves is gone at once, a turn visits only the
waiters its work may serve, and a lease handed to a gone caller comes back."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.actors.queries import Queries
from leasegate.actors.queries.actor import open_queries
from leasegate.actors.queries.lease import LeaseQueries, release_message
from leasegate.actors.queries.reads import GetQuery
from leasegate.actors.queries.results import QueryResult
from leasegate.actors.queries.submit import SubmitQuery
from leasegate.actors.queries.turn import QueryTurn
from leasegate.actors.runtime.actor import Actor, ActorStatistics
from leasegate.actors.runtime.mailbox import Envelope, Reply
from leasegate.actors.runtime.waiters import Wait, Waiters
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.connection import Database


class CountingQueue:
    """The query actor, counting the parked messages its turns look at."""

    def __init__(self, actor: Actor[Queries, QueryTurn]) -> None:
        self.actor = actor
        self.ref = actor.ref
        self.visited: list[object] = []
        # Each parked request's spec, its serve wrapped (the actor's own copy).
        for kind, spec in list(actor._waiting.items()):
            def serve(turn: QueryTurn, message: Any, serve: Any = spec.serve) -> Any:
                self.visited.append(message)
                return serve(turn, message)

            actor._waiting[kind] = dataclasses.replace(spec, serve=serve)

    def statistics(self) -> ActorStatistics:
        return self.actor.statistics()

    def drain(self) -> None:
        self.actor.drain()


@pytest.fixture
async def queue(nursery: trio.Nursery, db: Database, clock: Clock,
                settings: Settings) -> AsyncIterator[CountingQueue]:
    actor = open_queries(db, clock, settings)
    await nursery.start(actor.run)
    yield CountingQueue(actor)


async def submit(q: CountingQueue, query_id: str, site: str) -> None:
    await q.ref.ask(SubmitQuery("t1", site, "balance", {}, query_id))


async def wait_for_lease(q: CountingQueue, worker: str, sites: tuple[str, ...] | None,
                         got: list[str], scope: trio.CancelScope | None = None) -> None:
    with scope or trio.CancelScope():
        leases = await q.ref.ask_until(
            LeaseQueries(worker, sites=sites, wait=True), deadline=trio.current_time() + 30,
            give_back=release_message, on_timeout=())
        got.extend(lease.query_id for lease in leases)


async def read_when_ended(q: CountingQueue, query_id: str, read: list[Any]) -> None:
    read.append(await q.ref.ask_until(
        GetQuery(query_id, wait=True), deadline=trio.current_time() + 30,
        give_back=lambda _: None, on_timeout=None))


async def test_a_cancelled_waiter_leaves_at_once_without_a_turn(
        queue: CountingQueue, autojump_clock: trio.testing.MockClock) -> None:
    scopes = [trio.CancelScope() for _ in range(3)]
    async with trio.open_nursery() as nursery:
        for n, scope in enumerate(scopes):
            nursery.start_soon(wait_for_lease, queue, f"w{n}", ("a",), [], scope)
        await trio.testing.wait_all_tasks_blocked()
        assert queue.statistics().waiting == 3
        turns = queue.actor.turn.number
        scopes[1].cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert queue.statistics().waiting == 2
        for scope in scopes:
            scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert queue.statistics().waiting == 0
        assert queue.actor.turn.number == turns  # no turn was needed to forget them
    # ...and a later turn has nothing left to look at.
    await submit(queue, "q1", "a")
    assert queue.visited == []


async def test_a_turn_visits_only_the_waiters_its_work_may_serve(
        queue: CountingQueue, autojump_clock: trio.testing.MockClock) -> None:
    got: dict[str, list[str]] = {"a": [], "d": []}
    async with trio.open_nursery() as nursery:
        for n in range(200):  # leases for site b, and reads of 100 unfinished queries
            nursery.start_soon(wait_for_lease, queue, f"b{n}", ("b",), [])
        for n in range(100):
            await submit(queue, f"slow{n}", "c")
            nursery.start_soon(read_when_ended, queue, f"slow{n}", [])
        await trio.testing.wait_all_tasks_blocked()
        assert queue.statistics().waiting == 300
        queue.visited.clear()

        await submit(queue, "q1", "a")  # nobody waits for site a
        nursery.start_soon(wait_for_lease, queue, "wa", ("a",), got["a"])  # leased at once
        nursery.start_soon(wait_for_lease, queue, "wd", ("d",), got["d"])  # parks
        await trio.testing.wait_all_tasks_blocked()
        assert queue.visited == [] and got["a"] == ["q1"]
        await submit(queue, "q2", "d")
        await submit(queue, "q3", "e")
        await trio.testing.wait_all_tasks_blocked()
        assert got["d"] == ["q2"]
        assert queue.visited == [LeaseQueries("wd", sites=("d",), wait=True)]
        assert queue.statistics().waiting == 300
        nursery.cancel_scope.cancel()


async def test_ending_a_query_wakes_only_its_own_readers(
        queue: CountingQueue, autojump_clock: trio.testing.MockClock) -> None:
    read: list[Any] = []
    async with trio.open_nursery() as nursery:
        for n in range(50):
            await submit(queue, f"q{n}", "a")
            nursery.start_soon(read_when_ended, queue, f"q{n}", read)
        await trio.testing.wait_all_tasks_blocked()
        [lease] = await queue.ref.ask(LeaseQueries("w1", sites=("a",)))
        queue.visited.clear()
        await queue.ref.ask(QueryResult(lease.query_id, "w1", lease.lease_token,
                                            "succeeded"))
        await trio.testing.wait_all_tasks_blocked()
        assert [m.job_id for m in queue.visited] == [lease.query_id]  # type: ignore[attr-defined]
        assert [v.query_id for v in read] == [lease.query_id]
        nursery.cancel_scope.cancel()


async def test_a_lease_handed_to_a_gone_caller_is_taken_back_at_once(
        queue: CountingQueue, autojump_clock: trio.testing.MockClock) -> None:
    # A caller that vanished without leaving (its reply slot broken): the turn
    # serves it, the hand-off fails, and the lease goes back at once.
    reply = Reply[Any]()
    await queue.actor._send.send(Envelope(LeaseQueries("gone", wait=True), reply))
    await trio.testing.wait_all_tasks_blocked()
    assert queue.statistics().waiting == 1
    assert reply.leave() is None
    await submit(queue, "q1", "a")
    await trio.testing.wait_all_tasks_blocked()
    row = await queue.ref.ask(GetQuery("q1"))
    assert (row.status, row.attempts) == ("queued", 0)
    assert queue.statistics().waiting == 0
    got: list[str] = []
    await wait_for_lease(queue, "w2", None, got)
    assert got == ["q1"]


# ---- the structure itself -----------------------------------------------------------------


def envelope(name: str) -> Envelope[Any]:
    return Envelope(LeaseQueries(name))


def test_offer_is_oldest_first_across_queues_and_stops_a_dry_queue() -> None:
    waiters = Waiters()
    a1, b1, a2, b2, c1 = (envelope(n) for n in ("a1", "b1", "a2", "b2", "c1"))
    for env, queue in ((a1, "A"), (b1, "B"), (a2, "A"), (b2, "B"), (c1, "C")):
        waiters.add(env, Wait(queue, topics=(queue, "all")))
    offered: list[str] = []

    def serve(env: Envelope[Any]) -> bool:
        assert isinstance(env.message, LeaseQueries)
        name = env.message.worker_id
        offered.append(name)
        return name != "b1"  # B is dry

    waiters.offer({"A", "B"}, serve, [])
    assert offered == ["a1", "b1", "a2"]  # b2 skipped (dry queue), C not woken
    offered.clear()
    waiters.offer(None, serve, [(envelope("new"), Wait("N", ("N",)))])
    assert offered == ["a1", "b1", "a2", "c1", "new"]


def test_leaving_during_a_turn_is_counted_at_once_and_unlinked_after() -> None:
    waiters = Waiters()
    one, two = envelope("one"), envelope("two")
    waiters.add(one, Wait("Q", ("t",)))
    waiters.add(two, Wait("Q", ("t",)))
    waiters.busy = True
    waiters.leave(one)
    assert len(waiters) == 1
    offered: list[Envelope[Any]] = []

    def serve(env: Envelope[Any]) -> bool:
        offered.append(env)
        return True

    waiters.offer({"t"}, serve, [])
    assert offered == [two]  # the one that left is not served
    waiters.settle()
    waiters.take(two)
    assert len(waiters) == 0 and waiters.everyone() == []
    assert not waiters.add(one, Wait("Q"))  # a caller that left is never parked again
