"""The query actor driven directly: every rule of the query channel under the autojump clock."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.actors.queries import Queries
from leasegate.actors.queries.actor import open_queries
from leasegate.actors.queries.lease import LeaseQueries, release_message
from leasegate.actors.queries.reads import GetQuery, ListQueries
from leasegate.actors.queries.results import QueryResult
from leasegate.actors.queries.submit import SubmitQuery
from leasegate.actors.queries.turn import QueryTurn
from leasegate.actors.runtime.actor import Actor
from leasegate.clock import Clock
from leasegate.errors import IdempotencyConflict, QueryLeaseInvalid, QueryNotFound
from leasegate.settings import Settings
from leasegate.storage.connection import Database
from tests.conftest import EPOCH, ask, assert_none_lost_at_hand_off, parked, started

pytestmark = pytest.mark.both_engines  # the behavioural suite: SQLite and PostgreSQL

QueryActor = Actor[Queries, QueryTurn]


@pytest.fixture
async def queue(nursery: trio.Nursery, db: Database, clock: Clock,
                settings: Settings) -> QueryActor:
    return await started(nursery, open_queries(db, clock, settings))


async def submit(q: QueryActor, query_id: str = "q1", site: str = "shop") -> dict[str, Any]:
    reply: dict[str, Any] = await ask(q, SubmitQuery("t1", site, "balance", {"a": 1}, query_id))
    return reply


async def lease(q: QueryActor, worker: str = "w1", **kw: Any) -> list[dict[str, Any]]:
    reply: list[dict[str, Any]] = await ask(q, LeaseQueries(worker, **kw))
    return reply


async def status(q: QueryActor, query_id: str = "q1") -> dict[str, Any]:
    reply: dict[str, Any] = await ask(q, GetQuery(query_id))
    return reply


def elapsed(clock: Clock) -> float:
    return clock.now() - EPOCH


async def test_attempts_are_counted_at_lease(queue: QueryActor) -> None:
    await submit(queue)
    [first] = await lease(queue)
    assert first["attempt"] == 1
    assert (await status(queue))["attempts"] == 1


async def test_expired_lease_is_redelivered_at_its_deadline(
        queue: QueryActor, clock: Clock, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    [first] = await lease(queue)
    await trio.sleep(59.9)
    assert (await status(queue))["status"] == "leased"
    await trio.sleep(0.1)  # exactly the lease expiry: no lease call needed
    await trio.testing.wait_all_tasks_blocked()
    row = await status(queue)
    assert (row["status"], row["lease_owner"], elapsed(clock)) == ("queued", None, 60)
    [second] = await lease(queue, "w2")
    assert second["attempt"] == 2 and second["lease_token"] != first["lease_token"]


async def test_attempts_exhausted_fails(queue: QueryActor,
                                        autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    for attempt in (1, 2, 3):
        [got] = await lease(queue)
        assert got["attempt"] == attempt
        await trio.sleep(60)
    row = await status(queue)
    assert row["status"] == "failed" and row["attempts"] == 3
    assert "leased 3 times" in row["error"]["message"]
    assert await lease(queue) == []


async def test_ttl_comes_before_redelivery(queue: QueryActor, clock: Clock,
                                           autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    await trio.sleep(570)
    await lease(queue)  # leased at 570 s, lease would lapse at 630 s
    await trio.sleep(30)
    row = await status(queue)
    assert (row["status"], row["completed_at"]) == ("expired", "2026-11-30T08:10:00Z")
    assert elapsed(clock) == 600


async def test_queued_query_expires_unleased(queue: QueryActor,
                                             autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    await trio.sleep(600)
    assert (await status(queue))["status"] == "expired"
    assert await lease(queue) == []


async def test_late_result_after_redelivery_is_rejected(
        queue: QueryActor, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    [old] = await lease(queue, "w1")
    await trio.sleep(60)
    [new] = await lease(queue, "w2")
    with pytest.raises(QueryLeaseInvalid):
        await ask(queue, QueryResult("q1", "w1", old["lease_token"], "succeeded", {"x": 1}))
    done = await ask(queue, QueryResult("q1", "w2", new["lease_token"], "succeeded", {"x": 2}))
    assert done["result"] == {"x": 2}


async def test_result_exactly_at_lease_expiry_is_rejected(
        queue: QueryActor, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    [got] = await lease(queue)
    await trio.sleep(60)
    with pytest.raises(QueryLeaseInvalid):
        await ask(queue, QueryResult("q1", "w1", got["lease_token"], "succeeded"))


async def test_result_for_unknown_query(queue: QueryActor) -> None:
    with pytest.raises(QueryNotFound):
        await ask(queue, QueryResult("nope", "w1", "t", "succeeded"))


async def test_idempotent_submit(queue: QueryActor) -> None:
    assert (await submit(queue))["created"] is True
    assert (await submit(queue))["created"] is False
    with pytest.raises(IdempotencyConflict):
        await ask(queue, SubmitQuery("t1", "shop", "balance", {"a": 2}, "q1"))
    with pytest.raises(IdempotencyConflict):  # another tenant cannot replay (or read) it
        await ask(queue, SubmitQuery("t2", "shop", "balance", {"a": 1}, "q1"))


async def test_request_id_replays_the_same_lease(queue: QueryActor) -> None:
    await submit(queue, "q1")
    await submit(queue, "q2")
    first = await lease(queue, max=2, request_id="r1")
    again = await lease(queue, max=2, request_id="r1")
    assert again == first
    assert (await status(queue, "q1"))["attempts"] == 1
    assert await lease(queue, "w1", max=2, request_id="r2") == []
    assert await lease(queue, "other-worker", request_id="r1") == []


async def test_max_and_sites(queue: QueryActor) -> None:
    for i in range(12):
        await submit(queue, f"q{i}", site="a" if i % 2 else "b")
    got = await lease(queue, max=10, sites=("a",))
    assert [g["query_id"] for g in got] == ["q1", "q3", "q5", "q7", "q9", "q11"]
    got = await lease(queue, max=3)
    assert [g["query_id"] for g in got] == ["q0", "q2", "q4"]


async def test_parked_lease_is_served_in_fifo_order(
        queue: QueryActor, autojump_clock: trio.testing.MockClock) -> None:
    served: list[tuple[str, str]] = []

    async def waiter(name: str) -> None:
        got = await parked(queue, LeaseQueries(name, wait=True),
                           deadline=trio.current_time() + 30, give_back=release_message,
                           on_timeout=())
        served.extend((name, g["query_id"]) for g in got)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "w1")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter, "w2")
        await trio.testing.wait_all_tasks_blocked()
        await submit(queue, "q1")
        await submit(queue, "q2")
    assert served == [("w1", "q1"), ("w2", "q2")]


async def test_caller_gone_at_hand_off_loses_nothing(
        queue: QueryActor, autojump_clock: trio.testing.MockClock) -> None:
    """Cancel a parked long-poll at every point around the hand-off: the query is
    either delivered to it or back in the queue at once (not after the lease TTL)."""
    async def clear() -> None:
        for g in await lease(queue, "cleanup", max=10):
            await ask(queue, QueryResult(g["query_id"], "cleanup", g["lease_token"], "succeeded"))

    await assert_none_lost_at_hand_off(
        queue, LeaseQueries("w1", wait=True), give_back=release_message, prefix="q",
        submit=functools.partial(submit, queue), read=functools.partial(status, queue),
        clear=clear)


async def test_retention_purge(queue: QueryActor, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    [got] = await lease(queue)
    await ask(queue, QueryResult("q1", "w1", got["lease_token"], "succeeded"))
    await trio.sleep(7 * 86400 - 1)
    assert (await status(queue))["status"] == "succeeded"
    await trio.sleep(61)  # the purge job runs every minute
    with pytest.raises(QueryNotFound):
        await status(queue)
    assert any(job.name == "purge_queries" and job.runs > 0
               for job in queue.statistics().jobs)


async def test_list_filters(queue: QueryActor) -> None:
    await submit(queue, "a", site="s1")
    await submit(queue, "b", site="s2")
    page = await ask(queue, ListQueries(tenant="t1", site="s2"))
    assert [q["query_id"] for q in page["items"]] == ["b"] and page["total"] == 1


async def test_drain_answers_parked_leases_with_empty_list(
        queue: QueryActor, autojump_clock: trio.testing.MockClock) -> None:
    results: list[Any] = []

    async def waiter() -> None:
        results.append(await parked(queue, LeaseQueries("w1", wait=True),
                                    deadline=trio.current_time() + 30,
                                    give_back=release_message, on_timeout="timeout"))

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(3)
        queue.drain()
    assert results == [[]] and trio.current_time() - start == 3


async def test_round_trip_on_the_storage_thread(tmp_path: Any, clock: Clock,
                                                settings: Settings) -> None:
    """The served process runs SQL on a dedicated thread, not inline: same results."""
    from tests.conftest import open_db

    threaded = open_db(tmp_path / "threaded.db", inline=False)
    actor = open_queries(threaded, clock, settings)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        await submit(actor)
        [got] = await lease(actor)
        done = await ask(actor, QueryResult("q1", "w1", got["lease_token"], "succeeded", {}))
        assert done["status"] == "succeeded"
        results: list[Any] = []

        async def waiter() -> None:
            results.append(await parked(actor, LeaseQueries("w2", wait=True),
                                        deadline=trio.current_time() + 5,
                                        give_back=release_message, on_timeout=()))

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        await submit(actor, "q2")
        actor.close()
    assert [g["query_id"] for g in results[0]] == ["q2"]
    threaded.close()


async def test_drain_answers_a_waiting_get_with_the_query_as_it_is(
        queue: QueryActor, autojump_clock: trio.testing.MockClock) -> None:
    await submit(queue)
    got: list[Any] = []

    async def upstream() -> None:
        got.append(await parked(queue, GetQuery("q1", wait=True),
                                deadline=trio.current_time() + 30,
                                give_back=lambda _: None, on_timeout=None))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(upstream)
        await trio.sleep(2)
        queue.drain()
    assert got[0]["status"] == "queued" and got[0]["query_id"] == "q1"


async def test_a_refused_first_message_of_a_turn_leaves_the_rest_of_the_turn_applied(
        queue: QueryActor) -> None:
    """On PostgreSQL a turn's first message runs without a savepoint: refusing it
    restarts the transaction, and the turn's next message is applied as if alone."""
    await submit(queue, "q1")
    answers: dict[str, Any] = {}

    async def send(name: str, message: SubmitQuery) -> None:
        try:
            answers[name] = await ask(queue, message)
        except IdempotencyConflict as exc:
            answers[name] = exc

    commits = queue.statistics().commits
    async with trio.open_nursery() as senders:  # both in the inbox before the next turn
        senders.start_soon(send, "conflict", SubmitQuery("t1", "shop", "balance", {"a": 2},
                                                         "q1"))
        senders.start_soon(send, "new", SubmitQuery("t1", "shop", "balance", {"a": 1}, "q2"))
    assert queue.statistics().commits == commits + 1  # one turn
    assert isinstance(answers["conflict"], IdempotencyConflict)
    assert answers["new"]["created"] is True
    assert (await status(queue, "q2"))["status"] == "queued"
    assert (await status(queue, "q1"))["params"] == {"a": 1}
