"""The SDK's batches: ``submit_many_*`` and workers with ``batch``, against the real app.

The async tests run the gateway in-process (its Quart app behind an httpx
transport) under the autojump clock; the sync ones against a served gateway.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import outcome
import pytest
import trio

from leasegate.client import (
    AsyncClient,
    AsyncJob,
    AsyncWorker,
    Client,
    Failed,
    HandlerResult,
    IdempotencyConflict,
    InsufficientFunds,
    InvalidRequest,
    Job,
    Retry,
    Worker,
)
from leasegate.client._batch import LEASE_MARGIN, Outbox
from tests.conftest import Gateway
from tests.served import Served
from tests.test_http_tasks import ORDER
from tests.test_ledger import credit

Json = dict[str, Any]


class AppTransport(httpx.AsyncBaseTransport):
    """httpx → the gateway's Quart app in this process; counts the calls by path, keeps
    each call's query string and time, and lets a test change a request body on its
    way (``tamper``, which may also raise as a bug below the SDK would)."""

    def __init__(self, gateway: Gateway, nursery: trio.Nursery) -> None:
        self.gateway = gateway
        self.nursery = nursery
        self.calls: Counter[str] = Counter()
        self.sent: list[tuple[str, dict[str, str], float]] = []  # (call, query, when)
        self.tamper: Callable[[str, Json], Json] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls[f"{request.method} {path}"] += 1
        self.sent.append((f"{request.method} {path}", dict(request.url.params),
                          trio.current_time()))
        data = await request.aread()
        if data and self.tamper is not None:
            data = json.dumps(self.tamper(path, json.loads(data))).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        answered, answer = trio.open_memory_channel[outcome.Outcome[httpx.Response]](1)

        async def serve() -> None:  # not in the caller's task: a renewal may be cancelled
            response = await outcome.acapture(self._serve, request.method, path, headers, data,
                                              dict(request.url.params) or None)
            answered.send_nowait(response)

        self.nursery.start_soon(serve)
        return (await answer.receive()).unwrap()

    async def _serve(self, method: str, path: str, headers: dict[str, str], data: bytes,
                     query: dict[str, str] | None) -> httpx.Response:
        response = await self.gateway.client.open(path, method=method, headers=headers,
                                                  data=data, query_string=query)
        return httpx.Response(response.status_code, headers=list(response.headers.items()),
                              content=await response.get_data())


@pytest.fixture
def transport(gateway: Gateway, nursery: trio.Nursery) -> AppTransport:
    return AppTransport(gateway, nursery)


def client(gateway: Gateway, transport: AppTransport, who: str = "t1") -> AsyncClient:
    return AsyncClient("http://gateway", gateway.keys[who], transport=transport,
                       retry=Retry(attempts=2, backoff=0.1))


def worker(gateway: Gateway, transport: AppTransport, **options: Any) -> AsyncWorker:
    return AsyncWorker("http://gateway", gateway.keys["worker"], "wb", transport=transport,
                       wait_seconds=0, **options)


def stale_token(path: str, job_id: str) -> Callable[[str, Json], Json]:
    """A ``tamper`` that gives ``job_id``'s item an old lease token in batches to ``path``."""
    def tamper(sent_to: str, body: Json) -> Json:
        if sent_to == path:
            for item in body["items"]:
                if job_id in (item.get("task_id"), item.get("query_id")):
                    item["lease_token"] = "an-old-token"
        return body
    return tamper


def orders(count: int) -> list[Json]:
    """Orders t0, t1, ..., each on an account (a lane) of its own."""
    return [{**ORDER, "account": f"a{n}", "task_id": f"t{n}"} for n in range(count)]


def balance_queries(count: int) -> list[Json]:
    """Balance queries q0, q1, ...."""
    return [{"site": "shop", "kind": "balance", "query_id": f"q{n}"} for n in range(count)]


# ---- submit_many ---------------------------------------------------------------------

async def test_submit_many_answers_each_item(gateway: Gateway, transport: AppTransport,
                                             autojump_clock: Any) -> None:
    await credit(gateway, "t1", 100, "pay-1")
    async with client(gateway, transport) as upstream:
        await upstream.submit_task("shop", "place_order", {"v": 1}, task_id="old")
        answers = await upstream.submit_many_tasks([
            {"site": "shop", "kind": "place_order", "params": {"v": 1}, "task_id": "new"},
            {"site": "shop", "kind": "place_order", "params": {"v": 1}, "task_id": "new"},
            {"site": "shop", "kind": "place_order", "params": {"v": 2}, "task_id": "old"},
            {"site": "no site", "kind": "place_order"},
            {"site": "shop", "kind": "k", "account": "rich", "max_cost": 60},
            {"site": "shop", "kind": "k", "account": "poor", "max_cost": 60},
        ])
        assert [a["created"] if isinstance(a, dict) else type(a) for a in answers] == [
            True, False, IdempotencyConflict, InvalidRequest, True, InsufficientFunds]
        assert isinstance(answers[5], InsufficientFunds) and answers[5].status == 402
        # Across batches: the same ids again are replays.
        again = await upstream.submit_many_tasks([
            {"site": "shop", "kind": "place_order", "params": {"v": 1}, "task_id": "new"}])
        assert again[0] == {"task_id": "new", "status": "queued", "created": False}
        assert await upstream.submit_many_tasks([]) == []
        with pytest.raises(TypeError):
            await upstream.submit_many_tasks([{"site": "shop", "kind": "k", "colour": "red"}])
        before = transport.calls["POST /v1/tasks/batch"]
        many = await upstream.submit_many_queries(
            [{"site": "shop", "kind": "balance", "params": {"n": n}} for n in range(150)])
        assert [a["created"] for a in many] == [True] * 150  # type: ignore[index]
        assert transport.calls["POST /v1/queries/batch"] == 2  # 100 + 50
        assert transport.calls["POST /v1/tasks/batch"] == before  # the TypeError sent nothing


# ---- workers -------------------------------------------------------------------------

async def test_a_batch_worker_leases_starts_and_reports_together(
        gateway: Gateway, transport: AppTransport, autojump_clock: Any) -> None:
    async with client(gateway, transport) as upstream:
        answers = await upstream.submit_many_tasks(
            [{"site": "shop", "kind": "order", "params": {"n": n}, "account": f"lane-{n % 3}",
              "task_id": f"t{n}"} for n in range(6)])
        assert all(isinstance(a, dict) and a["created"] for a in answers)
        ran: list[str] = []

        async def handler(job: AsyncJob) -> HandlerResult:
            ran.append(job.id)
            await trio.sleep(1 + int(job.id[1:]) % 3)  # they end one after another
            if job.id == "t1":
                return Failed("out of stock")
            return {"order": job.id}

        batched = worker(gateway, transport, batch=10)
        # One task per lane (three lanes): the lane rule holds across the batch.
        assert await batched.run_once(handler) == 3
        assert sorted(ran) == ["t0", "t1", "t2"]
        assert await batched.run_once(handler) == 3
        await batched.aclose()
        for n in range(6):
            task = await upstream.get_task(f"t{n}")
            assert task["status"] == ("failed" if n == 1 else "succeeded"), task
    assert transport.calls["POST /v1/tasks/lease"] == 2
    assert transport.calls["POST /v1/tasks/start"] == 2  # one per lease call
    assert not any(call.endswith(("/start", "/result")) and "/v1/tasks/t" in call
                   for call in transport.calls)  # no single start or result
    # Results a second apart are not held for each other (linger 50 ms): one call each.
    assert transport.calls["POST /v1/tasks/results"] == 6


async def test_results_ending_together_share_one_call(
        gateway: Gateway, transport: AppTransport, autojump_clock: Any) -> None:
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries(balance_queries(20))
        batched = worker(gateway, transport, channel="queries", batch=20)

        async def handler(job: AsyncJob) -> HandlerResult:
            await trio.sleep(0.001 * int(job.id[1:]))  # within one linger of each other
            return {"balance": job.id}

        assert await batched.run_once(handler) == 20
        await batched.aclose()
        done = await upstream.list_queries(status="succeeded", limit=100)
    assert done["total"] == 20
    assert transport.calls["POST /v1/queries/results"] == 1
    assert not any("/result" in call and "/results" not in call for call in transport.calls)


async def test_a_stale_token_in_a_results_batch_fails_that_job_alone(
        gateway: Gateway, transport: AppTransport, autojump_clock: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    transport.tamper = stale_token("/v1/queries/results", "q1")
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_queries(balance_queries(3))

        async def handler(job: AsyncJob) -> HandlerResult:
            return {"ok": job.id}

        with caplog.at_level(logging.WARNING, "leasegate.client"):
            assert await worker(gateway, transport, channel="queries",
                                batch=3).run_once(handler) == 3
        statuses = {q: (await upstream.get_query(q))["status"] for q in ("q0", "q1", "q2")}
    assert statuses == {"q0": "succeeded", "q1": "leased", "q2": "succeeded"}
    assert transport.calls["POST /v1/queries/results"] == 1  # refused: given up, not resent
    assert any("q1: result refused" in r.getMessage() for r in caplog.records)


async def test_a_refused_start_in_a_batch_skips_that_handler_alone(
        gateway: Gateway, transport: AppTransport, autojump_clock: Any) -> None:
    transport.tamper = stale_token("/v1/tasks/start", "t1")
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_tasks(orders(3))
        ran: list[str] = []

        async def handler(job: AsyncJob) -> HandlerResult:
            ran.append(job.id)
            return {"ok": True}

        assert await worker(gateway, transport, batch=5).run_once(handler) == 2
        assert sorted(ran) == ["t0", "t2"]  # claim before execute: t1 never ran
        t1 = await upstream.get_task("t1")
        assert t1["status"] == "leased"  # its claim runs out and it is queued again


async def test_a_bug_sending_results_costs_that_batch_alone(
        gateway: Gateway, transport: AppTransport, autojump_clock: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    """An unexpected error while sending one batch of results (a bug below the SDK)
    gives up that batch's results (logged), and never cancels the lease call's other
    handlers nor keeps their results back."""
    exploded = trio.Event()

    def explode_once(path: str, body: Json) -> Json:
        if path.endswith("/results") and not exploded.is_set():
            exploded.set()
            raise RuntimeError("a bug below the SDK")
        return body

    transport.tamper = explode_once
    async with client(gateway, transport) as upstream:
        await upstream.submit_many_tasks(orders(3))
        finished: list[str] = []

        async def handler(job: AsyncJob) -> HandlerResult:
            if job.id != "t0":
                await exploded.wait()  # running when t0's result meets the bug
            finished.append(job.id)
            return {"ok": job.id}

        with caplog.at_level(logging.ERROR, "leasegate.client"):
            assert await worker(gateway, transport, batch=3).run_once(handler) == 3
        statuses = {t: (await upstream.get_task(t))["status"] for t in ("t0", "t1", "t2")}
    assert sorted(finished) == ["t0", "t1", "t2"]
    assert statuses == {"t0": "running", "t1": "succeeded", "t2": "succeeded"}
    assert any("could not be sent" in r.getMessage() and "t0" in r.getMessage()
               for r in caplog.records)


def test_batch_options_are_checked() -> None:
    cases: list[dict[str, Any]] = [{"batch": 0}, {"batch": 101}, {"batch": 5, "max": 3},
                                   {"linger": 2}]
    for options in cases:
        with pytest.raises(ValueError):
            AsyncWorker("http://gateway", "k", "w", **options)
        with pytest.raises(ValueError):
            Worker("http://gateway", "k", "w", **options)


# ---- the sync SDK against a served gateway -------------------------------------------

def test_sync_submit_many_and_a_sync_batch_worker(served: Served) -> None:
    seen: list[str] = []

    def handler(job: Job) -> HandlerResult:
        seen.append(job.id)
        time.sleep(0.05)
        return {"done": job.params["n"]}

    with Client(served.url, served.keys["client"]) as upstream, \
            Worker(served.url, served.keys["worker"], "desk-b", wait_seconds=1,
                   batch=10) as desk:
        answers = upstream.submit_many_tasks(
            [{"site": "shop", "kind": "k", "params": {"n": n}, "account": f"a{n}"}
             for n in range(4)] + [{"site": "shop", "kind": "k", "priority": 10}])
        assert isinstance(answers[4], InvalidRequest)
        ids = [a["task_id"] for a in answers[:4]]  # type: ignore[index]
        assert desk.run_once(handler) == 4  # four lanes, handlers side by side
        assert sorted(seen) == sorted(ids)
        for task_id in ids:
            assert upstream.get_task(task_id)["status"] == "succeeded"
        queries = upstream.submit_many_queries(
            [{"site": "shop", "kind": "balance", "params": {"n": n}} for n in range(3)])
    with Worker(served.url, served.keys["worker"], "desk-q", channel="queries",
                wait_seconds=1, batch=5) as reader:
        assert reader.run_once(lambda job: {"n": job.params["n"]}) == 3
    with Client(served.url, served.keys["client"]) as upstream:
        for query in queries:
            assert upstream.get_query(query["query_id"])["status"] == "succeeded"  # type: ignore[index]


def test_a_bug_sending_results_costs_the_sync_worker_that_batch_alone(
        served: Served, caplog: pytest.LogCaptureFixture) -> None:
    """As for the async worker: the batch that met the bug is given up, the others are
    handled and reported."""
    exploded = threading.Event()

    class Exploding(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/results") and not exploded.is_set():
                exploded.set()
                raise RuntimeError("a bug below the SDK")
            return super().handle_request(request)

    def handler(job: Job) -> HandlerResult:
        if job.params["n"] != 0:
            assert exploded.wait(10)  # running when the first result meets the bug
        return {"n": job.params["n"]}

    with Client(served.url, served.keys["client"]) as upstream, \
            Worker(served.url, served.keys["worker"], "desk-x", wait_seconds=1, batch=3,
                   transport=Exploding()) as desk:
        answers = upstream.submit_many_tasks(
            [{"site": "shop", "kind": "k", "params": {"n": n}, "account": f"a{n}"}
             for n in range(3)])
        ids = [a["task_id"] for a in answers]  # type: ignore[index]
        with caplog.at_level(logging.ERROR, "leasegate.client"):
            assert desk.run_once(handler) == 3
        statuses = [upstream.get_task(task_id)["status"] for task_id in ids]
    assert statuses == ["running", "succeeded", "succeeded"]
    assert any("could not be sent" in r.getMessage() for r in caplog.records)


# ---- the outbox's decisions ----------------------------------------------------------

def _job(job_id: str) -> Job:
    return Job("queries", {"query_id": job_id, "site": "s", "kind": "k", "params": {},
                           "lease_token": f"tok-{job_id}"}, "w1")


def test_the_outbox_lingers_never_past_a_lease_and_decides_per_item() -> None:
    outbox = Outbox("queries", "w1", size=10, linger=0.05, retry=Retry(backoff=1.0),
                    jobs=3)
    a, b, c = _job("a"), _job("b"), _job("c")
    c._due_by = 100.0 + LEASE_MARGIN + 0.01  # its lease ends 2.01 s from now
    outbox.put(a, {"worker_id": "w1", "lease_token": "tok-a", "outcome": "succeeded"}, 100.0)
    assert outbox.next_batch(100.0) is None  # waits for company, one linger at most
    outbox.put(c, {"worker_id": "w1", "lease_token": "tok-c", "outcome": "succeeded",
                   "result": {"big": "x" * 100}}, 100.0)
    assert outbox.wake_at() == pytest.approx(100.01)  # c's lease comes first
    batch = outbox.next_batch(100.01)
    assert batch is not None and [p.job.id for p in batch] == ["a", "c"]
    assert outbox.request(batch)["items"][0] == {"query_id": "a", "lease_token": "tok-a",
                                                 "outcome": "succeeded"}
    refused: list[tuple[str, int, int]] = []

    def decide(job: Any, body: Json, error: Any, tried: int) -> Json | None:
        refused.append((job.id, error.code, tried))
        return {**body, "result": "slim"} if error.code == 4130 and tried == 1 else None

    busy = {"status": 503, "error": {"code": 5030, "type": "unavailable", "message": "busy"}}
    outbox.answered(batch, {"items": [busy, busy]}, 100.01, decide)
    assert refused == []  # retried after a pause, never handed to the decision
    batch = [p for p in outbox.pending]
    outbox.pending.clear()
    reply = {"items": [{"status": 500, "error": {"code": 5000, "type": "internal_error",
                                                 "message": "bug"}},
                       {"status": 413, "error": {"code": 4130, "type": "payload_too_large",
                                                 "message": "too big"}}]}
    outbox.answered(batch, reply, 100.02, decide)
    # The first refusal of c, though its second answer: slimmed, as a single result is.
    assert refused == [("c", 4130, 1)]
    again = {p.job.id: p for p in outbox.pending}
    assert again["a"].ready_at > 100.02 and again["a"].tried == 2  # after a retry pause
    assert again["c"].body["result"] == "slim" and again["c"].ready_at == 100.02
    outbox.put(b, {"worker_id": "w1", "lease_token": "tok-b", "outcome": "failed"}, 100.03)
    assert outbox.running == 0  # every job ended: nothing waits for company any more
    batch = outbox.next_batch(100.03)
    assert batch is not None and [p.job.id for p in batch] == ["c", "b"]
    outbox.answered(batch, {"items": [{"status": 200, "query": {}},
                                      {"status": 409, "error": {
                                          "code": 6006, "type": "query_lease_invalid",
                                          "message": "old"}}]}, 100.04, decide)
    assert refused[-1] == ("b", 6006, 1)  # refused: given up (the worker logs it)
    assert [p.job.id for p in outbox.pending] == ["a"]
