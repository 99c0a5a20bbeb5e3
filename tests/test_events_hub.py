"""The live events' memory, in process (autojump clock): a reader that never reads
costs nothing and is told it missed events; events are streamed in id order
even when two actors' commits publish out of order; the stream route's body."""

from __future__ import annotations

import json
from pathlib import Path

import trio
import trio.testing

from leasegate.actors.event_hub import EventFilter, EventHub, Reset
from leasegate.actors.history import JobEvent
from leasegate.clock import Clock
from leasegate.settings import Settings
from tests.conftest import start_gateway


def event(event_id: int, tenant: str = "acme", job_id: str = "q1") -> JobEvent:
    return JobEvent(event_id, "query", job_id, tenant, "shop", None, "submitted", "queued",
                    1_800_000_000.0, {})


async def test_a_reader_that_never_reads_is_bounded_and_told_to_re_read(
        autojump_clock: trio.testing.MockClock) -> None:
    hub = EventHub(capacity=50, max_readers=10)
    hub.start(0)
    slow = hub.subscribe(EventFilter(), after=None)
    keeping_up = hub.subscribe(EventFilter(tenant="acme"), after=None)
    for n in range(1, 30):
        hub.publish(event(n))
    got = await keeping_up.next(1)
    assert isinstance(got, list) and [e.event_id for e in got] == list(range(1, 30))
    for n in range(30, 10_001):  # many events while `slow` reads nothing
        hub.publish(event(n))
    assert len(hub._ring) == 50  # all the memory there is, whoever reads how slowly
    missed = await slow.next(1)
    assert isinstance(missed, Reset) and missed.event_id == 10_000
    assert "re-read" in missed.reason
    hub.publish(event(10_001))
    after = await slow.next(1)  # resumed from now
    assert isinstance(after, list) and [e.event_id for e in after] == [10_001]
    assert await slow.next(5) == []  # nothing more: an empty read once the wait is over


async def test_events_are_streamed_in_id_order_and_a_hole_is_skipped(
        autojump_clock: trio.testing.MockClock) -> None:
    hub = EventHub(capacity=100, max_readers=10)
    hub.start(7)
    reader = hub.subscribe(EventFilter(), after=7)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.run)
        hub.publish(event(9))  # the actor that committed 8 has not published yet
        assert await reader.next(0.1) == []
        hub.publish(event(8))
        got = await reader.next(0.1)
        assert isinstance(got, list) and [e.event_id for e in got] == [8, 9]
        hub.publish(event(11))  # 10 never comes
        got = await reader.next(5)
        assert isinstance(got, list) and [e.event_id for e in got] == [11]
        nursery.cancel_scope.cancel()


async def test_resuming_and_filters(autojump_clock: trio.testing.MockClock) -> None:
    hub = EventHub(capacity=10, max_readers=1)
    hub.start(100)
    for n in range(101, 106):
        hub.publish(event(n, tenant="acme" if n % 2 else "other", job_id=f"q{n}"))
    resumed = hub.subscribe(EventFilter(tenant="acme"), after=102)
    got = await resumed.next(1)
    assert isinstance(got, list) and [e.event_id for e in got] == [103, 105]
    named = hub.subscribe(EventFilter(job_ids=frozenset({"q104"})), after=100)
    got = await named.next(1)
    assert isinstance(got, list) and [e.job_id for e in got] == ["q104"]
    for after in (99, 106):  # older than the ring's start, or never handed out
        reset = await hub.subscribe(EventFilter(), after=after).next(1)
        assert isinstance(reset, Reset) and reset.event_id == 105
    hub.close()
    assert await resumed.next(1) is None


async def test_the_stream_route_in_process(nursery: trio.Nursery, tmp_path: Path,
                                           clock: Clock,
                                           autojump_clock: trio.testing.MockClock) -> None:
    settings = Settings(max_wait_seconds=2.0, event_keepalive_seconds=0.5)
    gateway = await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)
    status, _ = await gateway.call("POST", "/v1/queries", "t1",
                                   json={"query_id": "q-live", "site": "shop", "kind": "k"})
    assert status == 201
    await gateway.call("POST", "/v1/queries", "t2",
                       json={"query_id": "q-theirs", "site": "shop", "kind": "k"})
    reply = await gateway.client.get("/v1/events?last_event_id=0", headers=gateway.auth("t1"))
    assert reply.status_code == 200
    assert reply.headers["Content-Type"] == "text/event-stream"
    text = (await reply.get_data()).decode()
    blocks = text.split("\n\n")
    assert blocks[0] == "retry: 1000"
    assert blocks[1].splitlines()[:2] == ["id: 1", "event: job"]
    data = json.loads(blocks[1].splitlines()[2].removeprefix("data: "))
    assert (data["job_id"], data["kind"], data["tenant"]) == ("q-live", "submitted", "t1")
    assert "q-theirs" not in text
    assert ": keep-alive" in blocks[2:]  # while idle, until max_wait_seconds


async def test_a_drain_ends_the_streams(nursery: trio.Nursery, tmp_path: Path, clock: Clock,
                                        autojump_clock: trio.testing.MockClock) -> None:
    gateway = await start_gateway(nursery, tmp_path / "leasegate.db", Settings(), clock)
    ended: list[float] = []

    async def read() -> None:
        reply = await gateway.client.get("/v1/events", headers=gateway.auth("admin"))
        await reply.get_data()
        ended.append(trio.current_time())

    nursery.start_soon(read)
    await trio.sleep(1)
    draining_at = trio.current_time()
    gateway.system.drain()  # what serve does on SIGTERM, before it stops hypercorn
    await trio.sleep(1)
    assert ended and ended[0] == draining_at  # at once, not after max_wait_seconds (30 s)
    status, body = await gateway.call("GET", "/v1/events", "admin")
    assert status == 503 and body["error"]["code"] == 5030
