"""The SDK against the real served gateway: a worker's whole protocol over the network."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.lowlevel

from leasegate.client import (
    AsyncClient,
    AsyncJob,
    AsyncWorker,
    Canceled,
    Client,
    HandlerResult,
    Job,
    Task,
    Worker,
)
from tests.conftest import Gateway
from tests.served import Served, start, stop
from tests.test_batch_sdk import AppTransport


def test_sync_worker_places_an_order_once(served: Served) -> None:
    calls: list[dict[str, Any]] = []

    def place_order(job: Job) -> HandlerResult:
        calls.append({"id": job.id, "account": job.account, "params": job.params})
        job.cost = 3
        return {"order_no": "A123"}

    with Client(served.url, served.keys["client"]) as client, \
            Worker(served.url, served.keys["worker"], "desk-1", sites=["shop"],
                   wait_seconds=2) as worker:
        submitted = client.submit_task("shop", "place_order", {"sku": "x"}, account="alice")
        assert worker.run_once(place_order) == 1
        done = client.wait_task(submitted["task_id"], timeout=10)
    assert calls == [{"id": submitted["task_id"], "account": "alice", "params": {"sku": "x"}}]
    assert (done["status"], done["result"]) == ("succeeded", {"order_no": "A123"})
    assert done["attempts"] == 1
    assert done["started_at"] is not None and done["lease_owner"] == "desk-1"


def test_sync_query_worker(served: Served) -> None:
    with Client(served.url, served.keys["client"]) as client, \
            Worker(served.url, served.keys["worker"], "desk-q", channel="queries",
                   wait_seconds=2) as worker:
        submitted = client.submit_query("shop", "balance", {"account": "a1"})
        assert worker.run_once(lambda job: {"balance": 12, "kind": job.kind}) == 1
        done = client.wait_query(submitted["query_id"], timeout=10)
    assert (done["status"], done["result"]) == ("succeeded", {"balance": 12, "kind": "balance"})


def test_cancel_reaches_a_running_handler_through_renew(tmp_path: Path) -> None:
    """A running task's cancel is delivered by renew; the handler ends it as canceled."""
    served = start(tmp_path / "var", {"LEASEGATE_TASK_LEASE_TTL": "3"})  # renew every ~1 s
    try:
        _cancel_through_renew(served)
    finally:
        stop(served)


def _cancel_through_renew(served: Served) -> None:
    started = threading.Event()

    def slow(job: Job) -> HandlerResult:
        started.set()
        job.wait_cancel_or_pause(timeout=20)
        assert job.cancel_requested
        return Canceled("user canceled", result={"placed": 0})

    with Client(served.url, served.keys["client"]) as client, \
            Worker(served.url, served.keys["worker"], "desk-2", wait_seconds=2) as worker:
        task_id = client.submit_task("shop", "place_order", {})["task_id"]
        runner = threading.Thread(target=worker.run_once, args=(slow,))
        runner.start()
        assert started.wait(10)
        assert client.cancel_task(task_id)["cancel_requested"] is True
        runner.join(30)
        assert not runner.is_alive()
        done = client.get_task(task_id)
    assert (done["status"], done["result"]) == ("canceled", {"placed": 0})


async def test_async_worker_under_trio(served: Served) -> None:
    async def handler(job: AsyncJob) -> HandlerResult:
        await trio.lowlevel.checkpoint()
        return {"seen": job.params["n"]}

    async with AsyncClient(served.url, served.keys["client"]) as client:
        ids = [(await client.submit_task("shop", "k", {"n": n}, account=f"acct-{n}"))["task_id"]
               for n in range(3)]
        worker = AsyncWorker(served.url, served.keys["worker"], "desk-async", max=3,
                             wait_seconds=2)
        handled = 0
        deadline = time.monotonic() + 20
        while handled < 3 and time.monotonic() < deadline:
            handled += await worker.run_once(handler)
        await worker.aclose()
        results = [await client.get_task(task_id) for task_id in ids]
    assert [r["result"] for r in results] == [{"seen": 0}, {"seen": 1}, {"seen": 2}]
    assert {r["status"] for r in results} == {"succeeded"}


# ---- waiting for a task: a long-poll, as for a query -----------------------------------


async def test_wait_task_long_polls_and_hears_of_the_end_at_once(
        gateway: Gateway, nursery: trio.Nursery, autojump_clock: Any) -> None:
    """A waiting upstream costs one request per 30 s, and has the task as it settles."""
    transport = AppTransport(gateway, nursery)
    returned: list[tuple[Task, float]] = []

    async def handler(job: AsyncJob) -> HandlerResult:
        return {"order_no": "A1"}

    async with AsyncClient("http://gateway", gateway.keys["t1"], transport=transport) as upstream, \
            AsyncWorker("http://gateway", gateway.keys["worker"], "desk-w", transport=transport,
                        wait_seconds=0) as desk:
        task_id = (await upstream.submit_task("shop", "k", {}, account="a1"))["task_id"]

        async def wait() -> None:
            task = await upstream.wait_task(task_id)
            returned.append((task, trio.current_time()))

        began = trio.current_time()
        async with trio.open_nursery() as waiting:
            waiting.start_soon(wait)
            await trio.sleep(100)
            assert await desk.run_once(handler) == 1
    ((task, at),) = returned
    assert task["status"] == "succeeded" and at - began < 101
    polls = [query for call, query, _ in transport.sent if call == f"GET /v1/tasks/{task_id}"]
    assert polls == [{"wait_seconds": "30"}] * 4  # at 0, 30, 60 and 90 s


def test_the_sync_wait_task_long_polls(served: Served) -> None:
    polled = threading.Event()
    gets: list[httpx.URL] = []

    class Counting(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.method == "GET":
                gets.append(request.url)
                polled.set()
            return super().handle_request(request)

    waited: list[Task] = []
    with Client(served.url, served.keys["client"], transport=Counting()) as client, \
            Worker(served.url, served.keys["worker"], "desk-w", wait_seconds=1) as worker:
        task_id = client.submit_task("shop", "place_order", {}, account="alice")["task_id"]
        waiter = threading.Thread(
            target=lambda: waited.append(client.wait_task(task_id, timeout=20)))
        waiter.start()
        assert polled.wait(10)
        assert worker.run_once(lambda job: {"order_no": "A1"}) == 1
        waiter.join(30)
    assert [task["status"] for task in waited] == ["succeeded"]
    assert [url.params.get("wait_seconds") for url in gets] == ["20"]  # one request, held
