"""The pieces of "several gateways on one database" that need no database (autojump
clock): what a turn announces and how another gateway's notices reach its actors, and
the live events' hub filled from the events table (every gateway's events, in id order,
none twice, a hole never waited for)."""

from __future__ import annotations

import json
from collections.abc import Hashable
from functools import partial

import pytest
import trio
import trio.testing

from leasegate.actors.event_stream import (
    IDLE_SECONDS,
    TAIL_FALLBACK_SECONDS,
    EventFilter,
    EventHub,
    JobEvent,
    Reset,
)
from leasegate.actors.other_gateways import (
    JOB_NOTICE_GAP_SECONDS,
    MAX_NOTICES,
    NOTICE_GAP_SECONDS,
    OtherGateways,
    decode,
    payloads,
)
from leasegate.actors.queue.leases import DryFilters, left_for_others
from leasegate.actors.queue.reads import NoticedWork
from leasegate.actors.runtime.turn import Turn
from leasegate.storage.keys_sql import REVOKED_NOTICE
from leasegate.storage.notices_sql import MAX_PAYLOAD
from tests.conftest import Gateway
from tests.test_http_tasks import lease


def test_a_turns_topics_travel_in_notices_under_the_payload_limit() -> None:
    topics: set[Hashable] = {("site", "shop"), ("site", "*")}
    topics |= {("job", f"t{n:04d}") for n in range(600)}
    sent = payloads("gw-a", "tasks", topics, everything=False)
    assert 1 < len(sent) <= MAX_NOTICES
    assert all(len(p.encode()) <= MAX_PAYLOAD for p in sent)
    notices = [decode(p) for p in sent]
    assert all(n is not None and n.gateway == "gw-a" and n.actor == "tasks"
               for n in notices)
    assert {t for n in notices if n is not None for t in n.topics} == topics
    # Too many for a handful of notices, or not plain strings: one "everything".
    many = {("job", f"t{n:06d}") for n in range(5000)}
    for said in (payloads("gw-a", "tasks", many, everything=False),
                 payloads("gw-a", "tasks", {("site", 1)}, everything=False),
                 payloads("gw-a", "tasks", (), everything=True)):
        assert len(said) == 1 and decode(said[0]) == decode(
            '{"g": "gw-a", "a": "tasks", "t": "*"}')
    for junk in ("", "[]", "{}", '{"g": 1, "a": "tasks", "t": "*"}',
                 '{"g": "x", "a": "tasks", "t": [[1]]}', "not json"):
        assert decode(junk) is None


class FakeQueue:
    def __init__(self) -> None:
        self.told: list[NoticedWork] = []
        self.gate = trio.Event()  # the actor is busy until set

    async def tell(self, message: NoticedWork, /) -> None:
        await self.gate.wait()
        self.told.append(message)


async def test_other_gateways_notices_reach_the_named_actor_coalesced_and_never_our_own(
        autojump_clock: trio.testing.MockClock) -> None:
    tasks, queries = FakeQueue(), FakeQueue()
    pokes: list[int] = []
    here = OtherGateways("gw-b", {"tasks": tasks, "queries": queries},
                     heard_any=lambda: pokes.append(1))
    mine = payloads("gw-b", "tasks", {("site", "own")}, everything=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(here.run)
        here.deliver(mine)  # our own commit's notice: nothing to do
        await trio.testing.wait_all_tasks_blocked()
        assert pokes == [] and here.notices == 0
        here.deliver(payloads("gw-a", "tasks", {("site", "shop")}, everything=False))
        await trio.testing.wait_all_tasks_blocked()  # the forwarder waits on a busy inbox
        here.deliver(payloads("gw-a", "tasks", {("job", "t1")}, everything=False)
                     + payloads("gw-c", "queries", {("site", "eu")}, everything=False))
        tasks.gate.set()
        queries.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert [m.topics for m in tasks.told] == [frozenset({("site", "shop")}),
                                                   frozenset({("job", "t1")})]
        assert queries.told == [NoticedWork(frozenset({("site", "eu")}))]
        assert len(pokes) == 2 and here.notices == 3
        here.resync()  # the listener reconnected: notices may have been lost
        await trio.testing.wait_all_tasks_blocked()
        assert tasks.told[-1].everything and queries.told[-1].everything
        nursery.cancel_scope.cancel()


def test_a_revocations_notice_and_a_resync_make_the_keys_look_again() -> None:
    """A revocation's notice (from any gateway or the CLI: no gateway's name) pokes the
    keys' watch and nothing else; so does a resync, since notices may have been lost."""
    looks: list[int] = []
    pokes: list[int] = []
    here = OtherGateways("gw-b", {}, heard_any=lambda: pokes.append(1),
                     others={"keys": lambda: looks.append(1)})
    here.deliver([REVOKED_NOTICE])
    assert (len(looks), pokes, here.notices) == (1, [], 0)
    here.resync()
    assert (len(looks), len(pokes)) == (2, 1)


async def test_notices_go_once_their_turns_committed_gathered_in_one_send(
        autojump_clock: trio.testing.MockClock) -> None:
    """Not in the turn's transaction (PostgreSQL's notification lock is the whole
    server's while a notifying transaction commits): after the commit, every
    NOTICE_GAP_SECONDS at most, what the committed turns woke in one send; a turn rolled
    back sends nothing."""
    sent: list[list[str]] = []
    arrived = trio.Event()

    async def send(notices: list[str]) -> None:
        sent.append(notices)
        arrived.set()

    elsewhere = OtherGateways("gw-a", {"tasks": FakeQueue(), "queries": FakeQueue()})
    elsewhere.send_with(send, error_log_window=600)
    announce = elsewhere.announcer("tasks")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(elsewhere.run)
        turns = []
        for site in ("north", "south", "west"):
            turn = Turn("tasks")
            turn.work_may_be_available(("site", site))
            announce(turn)  # just before its COMMIT
            turns.append(turn)
        await trio.sleep(NOTICE_GAP_SECONDS * 3)
        assert sent == []  # nothing before a commit
        began = trio.current_time()
        for turn in turns[:2]:  # two commits; the third turn rolled back
            for effect in turn.effects:
                effect()
        await arrived.wait()
        assert trio.current_time() - began <= NOTICE_GAP_SECONDS + 0.002
        (notices,) = sent
        heard = [decode(n) for n in notices]
        assert {t for n in heard if n is not None for t in n.topics} == {
            ("site", "north"), ("site", "south")}
        await trio.sleep(1)
        assert len(sent) == 1
        nursery.cancel_scope.cancel()


def _event(event_id: int, tenant: str = "acme") -> JobEvent:
    return JobEvent(event_id, "task", f"t{event_id}", tenant, "shop", None, "submitted",
                    "queued", 1_800_000_000.0, {}, "echo")


class Table:
    """The events table as every gateway's commits left it."""

    def __init__(self) -> None:
        self.rows: list[JobEvent] = []
        self.reads = 0

    async def after(self, event_id: int, limit: int) -> tuple[list[JobEvent], bool]:
        self.reads += 1
        await trio.sleep(0.001)  # a database round trip
        return [e for e in self.rows if e.event_id > event_id][:limit], False

    async def head(self) -> int:
        await trio.sleep(0.001)
        return max((e.event_id for e in self.rows), default=0)


async def test_notices_that_wake_no_lease_wait_longer_for_company(
        autojump_clock: trio.testing.MockClock) -> None:
    """A job's change (a GET ?wait_seconds elsewhere may wait on it) goes within
    JOB_NOTICE_GAP_SECONDS, with every other change of that time; a site's new work
    cuts the wait short."""
    sent: list[tuple[float, list[str]]] = []

    async def send(notices: list[str]) -> None:
        sent.append((trio.current_time(), notices))

    elsewhere = OtherGateways("gw-a", {"tasks": FakeQueue(), "queries": FakeQueue()})
    elsewhere.send_with(send, error_log_window=600)
    announce = elsewhere.announcer("tasks")

    def commit(*topics: Hashable) -> None:
        turn = Turn("tasks")
        turn.work_may_be_available(*topics)
        announce(turn)
        for effect in turn.effects:
            effect()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(elsewhere.run)
        began = trio.current_time()
        for n in range(20):
            commit(("job", f"t{n}"))
            await trio.sleep(JOB_NOTICE_GAP_SECONDS / 10)
        await trio.sleep(1)
        assert [round(at - began, 3) for at, _ in sent] == [0.05, 0.105]  # 20 in 2 sends
        heard = [decode(n) for _, notices in sent for n in notices]
        assert sorted(t for n in heard if n is not None for t in n.topics) == sorted(
            ("job", f"t{n}") for n in range(20))
        sent.clear()
        began = trio.current_time()
        commit(("job", "t99"))
        await trio.sleep(JOB_NOTICE_GAP_SECONDS / 5)
        commit(("site", "shop"))  # a lease may wait for it: within NOTICE_GAP_SECONDS
        await trio.sleep(1)
        assert [at - began for at, _ in sent] == [
            pytest.approx(JOB_NOTICE_GAP_SECONDS / 5 + NOTICE_GAP_SECONDS)]
        nursery.cancel_scope.cancel()


async def test_a_tailing_hub_streams_every_gateways_events_in_id_order_once(
        autojump_clock: trio.testing.MockClock) -> None:
    table = Table()
    hub = EventHub(capacity=100, max_readers=10, tail=table.after)
    hub.start(3)
    every: list[int] = []
    ours: list[int] = []
    hub.listeners.append(lambda e: every.append(e.event_id))  # the console's charts
    hub.own_listeners.append(lambda e: ours.append(e.event_id))  # this gateway's metrics
    reader = hub.subscribe(EventFilter(), after=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.run)
        # Another gateway committed 4 and 5; ours committed 7 (6 rolled back: a hole).
        table.rows += [_event(4), _event(5), _event(7)]
        hub.publish(_event(7))  # our own commit: only "read now"
        got = await reader.next(1)
        assert isinstance(got, list) and [e.event_id for e in got] == [4, 5, 7]
        table.rows.append(_event(8))
        hub.poke()  # another gateway's notification
        got = await reader.next(1)
        assert isinstance(got, list) and [e.event_id for e in got] == [8]
        table.rows.append(_event(9))  # its notification was lost: the slow timer reads
        began = trio.current_time()
        got = await reader.next(TAIL_FALLBACK_SECONDS * 2)
        assert isinstance(got, list) and [e.event_id for e in got] == [9]
        assert trio.current_time() - began <= TAIL_FALLBACK_SECONDS + 0.1
        assert await reader.next(0.5) == []  # nothing twice
        assert (every, ours) == ([4, 5, 7, 8, 9], [7])
        nursery.cancel_scope.cancel()


async def test_a_last_event_id_from_another_gateway_resumes_once_the_table_is_read(
        autojump_clock: trio.testing.MockClock) -> None:
    table = Table()
    hub = EventHub(capacity=100, max_readers=10, tail=table.after)
    hub.start(10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.run)
        # A client saw 12 on gateway A, then reconnects here before this hub read it.
        table.rows += [_event(11), _event(12), _event(13)]
        resumed = hub.subscribe(EventFilter(), after=12)
        await resumed.begin()
        assert resumed.cursor == 12
        got = await resumed.next(1)
        assert isinstance(got, list) and [e.event_id for e in got] == [13]
        unknown = hub.subscribe(EventFilter(), after=99)  # no gateway handed it out
        reset = await unknown.next(1)
        assert isinstance(reset, Reset) and reset.event_id == 13
        assert "not handed out" in reset.reason
        nursery.cancel_scope.cancel()


async def test_a_tailing_hub_nobody_streams_from_reads_nothing_and_catches_up_for_a_reader(
        autojump_clock: trio.testing.MockClock) -> None:
    """No stream open: no read of the table, whatever the gateways commit (this gateway's
    metrics still count its own events); the next stream waits for the catch-up, so
    one from now starts at the table's end and a Last-Event-ID resumes exactly."""
    table = Table()
    hub = EventHub(capacity=100, max_readers=10, tail=table.after, head=table.head)
    ours: list[int] = []
    hub.own_listeners.append(lambda e: ours.append(e.event_id))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.run)
        for n in range(1, 51):
            table.rows.append(_event(n))
            if n % 2:
                hub.publish(_event(n))  # ours
            else:
                hub.poke()  # another gateway's notice
            await trio.sleep(1)
        assert table.reads == 0
        assert ours == list(range(1, 51, 2))  # told as published, not read back
        now = hub.subscribe(EventFilter(), after=None)
        resumed = hub.subscribe(EventFilter(), after=40)
        for reader in (now, resumed):
            await reader.begin()
        assert (now.cursor, resumed.cursor) == (50, 40)
        table.rows.append(_event(51))
        hub.poke()
        for reader, ids in ((now, [51]), (resumed, [41, 42, 43, 44, 45, 46, 47, 48, 49,
                                                    50, 51])):
            got = await reader.next(1)
            assert isinstance(got, list) and [e.event_id for e in got] == ids
        assert ours == list(range(1, 51, 2))  # not counted again from the table
        # The streams end: the hub stops reading a while after.
        await trio.sleep(IDLE_SECONDS + TAIL_FALLBACK_SECONDS * 2)
        reads = table.reads
        for n in range(52, 400):  # the ring's capacity and more, while nobody reads
            table.rows.append(_event(n))
            hub.poke()
        await trio.sleep(60)
        assert table.reads == reads
        behind = hub.subscribe(EventFilter(), after=250)  # gone past the ring
        kept = hub.subscribe(EventFilter(), after=350)
        reset = await behind.next(1)
        assert isinstance(reset, Reset) and reset.event_id == 399
        assert "older than the events kept" in reset.reason
        got = await kept.next(1)
        assert isinstance(got, list) and [e.event_id for e in got] == list(range(351, 400))
        assert table.reads - reads <= 3  # the catch-up read only the ring's worth
        nursery.cancel_scope.cancel()


def test_a_site_whose_work_a_lease_parked_here_took_whole_is_left_out_of_the_notices(
        ) -> None:
    dry = DryFilters()
    dry.add(7, ("north",))  # in turn 7 a lease for north got fewer than its max
    topics: set[Hashable] = {("site", "north"), ("site", "*"), ("site", "south"),
                             ("job", "t1")}
    assert left_for_others(topics, dry, 7) == {("site", "south"), ("site", "*"),
                                               ("job", "t1")}
    assert left_for_others({("site", "north"), ("site", "*")}, dry, 7) == set()
    assert left_for_others(topics, dry, 8) == topics  # another turn's filters say nothing
    dry.add(7, None)  # one for every site: nothing is left anywhere
    assert left_for_others(topics, dry, 7) == {("job", "t1")}


def test_a_notice_is_small_json() -> None:
    (one,) = payloads("gw-a", "queries", {("site", "shop")}, everything=False)
    assert json.loads(one) == {"g": "gw-a", "a": "queries", "t": [["site", "shop"]]}


async def test_another_gateways_work_costs_a_turn_only_where_something_waits_for_it(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    """A notice wakes the parked leases of its sites; with none parked there, the actor
    takes no turn for it (its own deadline poll meets other gateways' deadlines)."""
    actor = gateway.system.task_actor
    await trio.testing.wait_all_tasks_blocked()
    before = actor.statistics().commits
    await gateway.system.tasks.tell(NoticedWork(frozenset({("site", "shop")})))
    await trio.testing.wait_all_tasks_blocked()
    assert actor.statistics().commits == before  # nobody parked: no turn
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(lease, gateway, "w1", wait_seconds=20, sites=["shop"]))
        await trio.testing.wait_all_tasks_blocked()
        assert actor.statistics().waiting == 1
        parked_at = actor.statistics().commits
        await gateway.system.tasks.tell(NoticedWork(frozenset({("site", "elsewhere")})))
        await trio.testing.wait_all_tasks_blocked()
        assert actor.statistics().commits == parked_at  # not its site
        await gateway.system.tasks.tell(NoticedWork(frozenset({("site", "shop")})))
        await trio.testing.wait_all_tasks_blocked()
        assert actor.statistics().commits == parked_at + 1  # offered: nothing there yet
        nursery.cancel_scope.cancel()
