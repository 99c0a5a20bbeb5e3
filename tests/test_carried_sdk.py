"""The SDK workers carry their results on the next lease call: a busy worker makes
about one request per lease call, and no result waits longer than ``linger`` (20 ms)
for company, nor past its lease (autojump clock, the gateway in-process)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from leasegate.client import AsyncJob, AsyncWorker, HandlerResult
from leasegate.client._batch import DEFAULT_LINGER
from tests.conftest import Gateway
from tests.test_batch_sdk import AppTransport, balance_queries, client, orders, worker

Json = dict[str, Any]


class Recording(AppTransport):
    """:class:`AppTransport` that also keeps, per lease call, the ids of the results it
    carried, and the time each call was sent."""

    def __init__(self, gateway: Gateway, nursery: trio.Nursery) -> None:
        super().__init__(gateway, nursery)
        self.carried: list[tuple[float, list[str]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/lease"):
            body = json.loads(await request.aread())
            ids = [item.get("task_id") or item.get("query_id")
                   for item in body.get("results", ())]
            if ids:
                self.carried.append((trio.current_time(), ids))
        return await super().handle_async_request(request)


@pytest.fixture
def transport(gateway: Gateway, nursery: trio.Nursery) -> Recording:
    return Recording(gateway, nursery)


async def run_until_done(gateway: Gateway, transport: AppTransport, batched: AsyncWorker,
                         handler: Any, channel: str, count: int) -> None:
    async with client(gateway, transport) as upstream, trio.open_nursery() as nursery:
        nursery.start_soon(batched.run, handler)
        while True:
            await trio.sleep(0.5)
            page = await (upstream.list_queries(status="succeeded", limit=1)
                          if channel == "queries" else
                          upstream.list_tasks(status="succeeded", limit=1))
            if page["total"] == count:
                break
        batched.stop()


def requests(transport: AppTransport, channel: str) -> int:
    return sum(n for call, n in transport.calls.items() if call.startswith(f"POST /v1/{channel}/")
               and not call.endswith(("/batch", f"/v1/{channel}")))


async def test_a_busy_query_worker_sends_about_one_request_per_ten_jobs(
        gateway: Gateway, transport: Recording, autojump_clock: Any) -> None:
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries(balance_queries(100))

    async def handler(job: AsyncJob) -> HandlerResult:
        await trio.sleep(0.001)
        return {"balance": job.id}

    batched = worker(gateway, transport, channel="queries", batch=10)
    await run_until_done(gateway, transport, batched, handler, "queries", 100)
    await batched.aclose()
    assert transport.calls["POST /v1/queries/results"] == 0  # every result rode a lease
    assert sum(len(ids) for _, ids in transport.carried) == 100
    assert requests(transport, "queries") <= 100 / 10 + 2, transport.calls


async def test_the_default_task_worker_reports_with_its_next_lease_call(
        gateway: Gateway, transport: Recording, autojump_clock: Any) -> None:
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_tasks(orders(3))

    async def handler(job: AsyncJob) -> HandlerResult:
        return {"order": job.id}

    single = worker(gateway, transport)  # max 1, no batch: the defaults
    await run_until_done(gateway, transport, single, handler, "tasks", 3)
    await single.aclose()
    assert not any(call.endswith(("/result", "/results")) for call in transport.calls)
    assert [ids for _, ids in transport.carried] == [["t0"], ["t1"], ["t2"]]
    assert transport.calls["POST /v1/tasks/start"] == 0  # single starts, per task
    assert sum(n for call, n in transport.calls.items() if call.endswith("/start")) == 3


async def test_a_result_never_waits_past_its_linger(
        gateway: Gateway, transport: Recording, autojump_clock: Any) -> None:
    """q0 ends at once, q1 ten seconds later: q0's result goes out within the linger
    (a results call), q1's with the lease call that follows it at once."""
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries(balance_queries(2))
    ended: dict[str, float] = {}

    async def handler(job: AsyncJob) -> HandlerResult:
        if job.id == "q1":
            await trio.sleep(10)
        ended[job.id] = trio.current_time()
        return {"balance": job.id}

    batched = worker(gateway, transport, channel="queries", batch=2)
    await run_until_done(gateway, transport, batched, handler, "queries", 2)
    await batched.aclose()
    assert DEFAULT_LINGER == 0.02
    results = [when for call, _, when in transport.sent if call == "POST /v1/queries/results"]
    assert len(results) == 1
    assert ended["q0"] <= results[0] <= ended["q0"] + DEFAULT_LINGER
    carried_at, ids = transport.carried[0]
    assert ids == ["q1"]
    assert ended["q1"] <= carried_at <= ended["q1"] + DEFAULT_LINGER


async def test_a_stopped_worker_sends_what_it_carried(
        gateway: Gateway, transport: Recording, autojump_clock: Any) -> None:
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries([{"site": "shop", "kind": "balance",
                                             "query_id": "q0"}])
        single = worker(gateway, transport, channel="queries")

        async def handler(job: AsyncJob) -> HandlerResult:
            single.stop()  # no lease call follows: the result goes alone
            return {"balance": 1}

        await single.run(handler)
        await single.aclose()
        assert (await upstream.get_query("q0"))["status"] == "succeeded"
    assert transport.calls["POST /v1/queries/q0/result"] == 1
    assert transport.carried == []


async def test_a_batch_worker_renews_its_tasks_in_one_call(
        gateway: Gateway, transport: Recording, autojump_clock: Any) -> None:
    flags: dict[str, tuple[bool, bool]] = {}
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_tasks(orders(3))

        async def handler(job: AsyncJob) -> HandlerResult:
            if job.id == "t1":
                await upstream.cancel_task("t1")  # running: cancel_requested
            ttl = gateway.system.settings.task_lease_ttl
            await trio.sleep(ttl * 1.5)  # renewed on the way, or the lease would lapse
            flags[job.id] = (job.cancel_requested, job.lease_lost)
            return {"order": job.id}

        # The in-process gateway sends no Date header: the worker reads its clock.
        assert await worker(gateway, transport, batch=3,
                            wall_clock=gateway.system.clock.now).run_once(handler) == 3
        tasks = {t: (await upstream.get_task(t))["status"] for t in ("t0", "t1", "t2")}
    assert tasks == {"t0": "succeeded", "t1": "succeeded", "t2": "succeeded"}
    assert flags == {"t0": (False, False), "t1": (True, False), "t2": (False, False)}
    # Started together, renewed together: every third of the lease, one call for all.
    assert 2 <= transport.calls["POST /v1/tasks/renew"] <= 1.5 * 3 + 1
    assert not any(call.endswith("/renew") and call != "POST /v1/tasks/renew"
                   for call in transport.calls), transport.calls


async def test_a_worker_stopped_in_a_long_poll_that_carried_results_sends_them_once_more(
        gateway: Gateway, transport: Recording, autojump_clock: Any) -> None:
    """The lease call took the results (committed before it waits); stopped, the worker
    cannot read its answers, so it sends them again in one results call: retries."""
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries(balance_queries(5))
        polling = worker(gateway, transport, channel="queries", batch=5)
        polling.wait_seconds = 20

        async def handler(job: AsyncJob) -> HandlerResult:
            return {"balance": 1}

        async with trio.open_nursery() as inner:
            inner.start_soon(polling.run, handler)
            await trio.sleep(5)  # the second lease call waits, carrying the five results
            done = await upstream.list_queries(status="succeeded", limit=10)
            assert done["total"] == 5
            polling.stop()
        await polling.aclose()
    assert [len(ids) for _, ids in transport.carried] == [5]
    assert transport.calls["POST /v1/queries/results"] == 1
    assert not any(call.endswith("/result") for call in transport.calls)


async def test_a_lease_call_that_came_back_short_waits_out_the_linger_for_more_work(
        gateway: Gateway, transport: Recording, autojump_clock: Any) -> None:
    """q0 alone (no backlog): its result waits its linger, and q1, submitted meanwhile,
    comes back on the lease call that carries it, not on a call of its own."""
    ended: dict[str, float] = {}
    q0_ended, both_ended = trio.Event(), trio.Event()

    async def handler(job: AsyncJob) -> HandlerResult:
        ended[job.id] = trio.current_time()
        (q0_ended if job.id == "q0" else both_ended).set()
        return {"balance": job.id}

    batched = worker(gateway, transport, channel="queries", batch=10)
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries(balance_queries(1))

        async def submit_q1_within_the_linger() -> None:
            await q0_ended.wait()
            await trio.sleep(DEFAULT_LINGER / 2)
            await upstream.submit_many_queries(balance_queries(2)[1:])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit_q1_within_the_linger)
            nursery.start_soon(batched.run, handler)
            await both_ended.wait()
            await trio.sleep(1)
            batched.stop()
    await batched.aclose()
    (first_at, first), (_, second) = transport.carried
    assert first == ["q0"] and second == ["q1"]
    assert first_at == pytest.approx(ended["q0"] + DEFAULT_LINGER, abs=1e-6)
    assert ended["q1"] == pytest.approx(first_at, abs=1e-6)  # leased by that very call
    # q0's lease call, the one that carried its result (and brought q1), q1's result's
    assert transport.calls["POST /v1/queries/lease"] == 3


@pytest.mark.parametrize("batch", [10, 100])
async def test_a_lease_call_of_ten_or_more_leases_again_at_once(
        gateway: Gateway, transport: Recording, autojump_clock: Any, batch: int) -> None:
    """A lease call that brought ten jobs or more (a full one of ``batch=10``, twenty of
    ``batch=100``): the next one, carrying their results, goes as soon as the last of
    them ends."""
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries(balance_queries(20))
    ended: list[float] = []

    async def handler(job: AsyncJob) -> HandlerResult:
        await trio.sleep(0.001)
        ended.append(trio.current_time())
        return {"balance": job.id}

    batched = worker(gateway, transport, channel="queries", batch=batch)
    await run_until_done(gateway, transport, batched, handler, "queries", 20)
    await batched.aclose()
    assert transport.calls["POST /v1/queries/results"] == 0
    first_at, ids = transport.carried[0]
    assert len(ids) == min(batch, 20)
    assert first_at == pytest.approx(ended[len(ids) - 1], abs=1e-6)


async def test_a_worker_stopped_while_it_gathers_sends_its_results_at_once(
        gateway: Gateway, transport: Recording, autojump_clock: Any) -> None:
    """Stopped during the linger after a short lease call: the results it carried go at
    once, in a call of their own, and no lease call follows."""
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries(balance_queries(1))
        batched = worker(gateway, transport, channel="queries", batch=10)
        ended: list[float] = []
        handled = trio.Event()

        async def handler(job: AsyncJob) -> HandlerResult:
            ended.append(trio.current_time())
            handled.set()
            return {"balance": job.id}

        async def stop_within_the_linger() -> None:
            await handled.wait()
            await trio.sleep(DEFAULT_LINGER / 10)
            batched.stop()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_within_the_linger)
            await batched.run(handler)
        await batched.aclose()
        assert (await upstream.get_query("q0"))["status"] == "succeeded"
    results = [when for call, _, when in transport.sent if call == "POST /v1/queries/results"]
    assert results == [pytest.approx(ended[0] + DEFAULT_LINGER / 10, abs=1e-6)]
    assert transport.calls["POST /v1/queries/lease"] == 1
    assert transport.carried == []
