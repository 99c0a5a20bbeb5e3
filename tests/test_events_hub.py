"""The live events' memory, in process (autojump clock): a reader that never reads
costs nothing and is told it missed events; events are streamed in id order
even when two actors' commits publish out of order; the stream route's body."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import trio
import trio.testing

from leasegate.actors.event_stream import GAP_SECONDS, EventFilter, EventHub, JobEvent, Reset
from leasegate.actors.tasks.fenced import RenewTask
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
        opened = trio.current_time()
        hub.publish(event(11))  # 10 never comes
        await trio.sleep(0.5)
        hub.publish(event(12))  # ahead of the hole too: its deadline does not move
        got = await reader.next(5)
        assert isinstance(got, list) and [e.event_id for e in got] == [11, 12]
        assert trio.current_time() - opened == GAP_SECONDS  # skipped at its deadline
        nursery.cancel_scope.cancel()


async def test_one_commits_events_reach_a_waiting_reader_in_one_read_in_id_order(
        autojump_clock: trio.testing.MockClock) -> None:
    hub = EventHub(capacity=100, max_readers=10)
    hub.start(0)
    reader = hub.subscribe(EventFilter(), after=None)
    reads: list[list[int]] = []

    async def read() -> None:
        got = await reader.next(1)
        assert isinstance(got, list)
        reads.append([e.event_id for e in got])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        hub.publish(event(2))  # another actor's commit, ahead of a hole
        hub.publish_many([event(3), event(1), event(4)])  # 1 fills the hole
    assert reads == [[1, 2, 3, 4]]  # one read, nothing held back, in id order
    assert hub.last_event_id == 4
    began = trio.current_time()
    hub.publish(event(5))  # no hole left open: the next event is streamed at once
    got = await reader.next(1)
    assert isinstance(got, list) and [e.event_id for e in got] == [5]
    assert trio.current_time() == began


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
    assert blocks[0] == "id: 0\nretry: 1000"  # where a reconnect resumes, if no event came
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


async def test_stale_reclaim_the_cap_and_the_purge(nursery: trio.Nursery, tmp_path: Path,
                                                  clock: Clock,
                                                  autojump_clock: trio.testing.MockClock
                                                  ) -> None:
    settings = Settings(task_lease_ttl=10, task_retention=60, housekeeping_interval=5)
    gateway = await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)

    async def call(method: str, path: str, who: str, body: dict[str, Any] | None = None
                   ) -> Any:
        status, reply = await gateway.call(method, path, who, json=body)
        assert status in (200, 201), (path, reply)
        return reply

    async def running(task_id: str) -> dict[str, str]:
        await call("POST", "/v1/tasks", "t1", {"task_id": task_id, "site": "shop",
                                                "kind": "k", "account": task_id})
        [lease] = (await call("POST", "/v1/tasks/lease", "worker", {"worker_id": "w1"}))["items"]
        fenced = {"worker_id": "w1", "lease_token": lease["lease_token"]}
        await call("POST", f"/v1/tasks/{task_id}/start", "worker", fenced)
        return fenced

    await running("t-stale")
    await trio.sleep(11)  # the lease lapses
    await call("POST", "/v1/tasks/t-stale/reclaim", "admin",
               {"action": "failed", "reason": "checked the site: not placed"})
    items = (await call("GET", "/v1/tasks/t-stale/events", "t1"))["items"]
    assert [i["kind"] for i in items] == ["submitted", "leased", "started", "stale",
                                          "reclaimed"]
    assert items[3]["status"] == "stale"
    assert items[3]["detail"]["reason"].startswith("lease_expired: worker w1")
    assert items[4]["status"] == "failed"
    assert items[4]["detail"]["action"] == "failed"
    assert items[4]["detail"]["reason"] == "checked the site: not placed"
    assert items[4]["detail"]["by"].startswith("admin (")  # key name (key id)

    fenced = await running("t-long")
    tasks = gateway.system.tasks
    await tasks.ask(RenewTask("t-long", fenced["worker_id"], fenced["lease_token"],
                              progress={"rows": ["x" * 100] * 100}))  # 10 kB
    for n in range(250):  # straight to the actor: quicker than 250 requests
        await tasks.ask(RenewTask("t-long", fenced["worker_id"], fenced["lease_token"],
                                  progress={"n": n}))
    items = (await call("GET", "/v1/tasks/t-long/events", "t1"))["items"]
    assert items[3]["detail"]["progress"] == {
        "omitted": "10310 bytes of JSON (kept up to 2048)"}  # a big checkpoint: its size
    assert len(items) == 200  # the first 20 and the latest 180
    assert [i["kind"] for i in items[:3]] == ["submitted", "leased", "started"]
    assert [i["detail"]["progress"]["n"] for i in items[4:20]] == list(range(16))
    assert [i["detail"]["progress"]["n"] for i in items[20:]] == list(range(70, 250))

    await trio.sleep(70)  # t-stale (failed) is past task_retention: purged, history too
    status, _ = await gateway.call("GET", "/v1/tasks/t-stale/events", "t1")
    assert status == 404
    with sqlite3.connect(tmp_path / "leasegate.db") as db:
        left = db.execute("SELECT job_id, count(*) FROM job_events GROUP BY job_id").fetchall()
    assert left == [("t-long", 200)]
