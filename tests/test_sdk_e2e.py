"""The SDK against the real served gateway: a worker's whole protocol over the network."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

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
    Worker,
)
from tests.served import Served, start, stop


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
