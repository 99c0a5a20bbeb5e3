"""The SDK's own CPU per job, in-process, against a fake gateway.

``.venv/bin/python bench/client_cost.py`` (``--jobs``, ``--repeat``; ``--profile
PATH`` prints a cProfile of one path instead) prints, for each path that
``bench/lifecycle.py`` drives, the client's CPU microseconds per job:

* producers: ``Client.submit_query`` / ``submit_task`` (one job a call) and
  ``submit_many_queries`` / ``submit_many_tasks`` (100 a call), over an
  ``httpx.MockTransport``;
* consumers: ``AsyncWorker(max=10)`` (one start call per task, one result call
  per job) and ``AsyncWorker(batch=100)`` (starts and results in one call each),
  under trio, over an async transport that answers at once; and the blocking
  ``Worker`` (one job a lease call, and ``batch=100``: handlers in threads), over
  an ``httpx.MockTransport``;

and the CPU to construct a ``Client`` and an ``AsyncWorker`` for an ``http://``
gateway (the real transport: no request is sent).

The fake answers with replies encoded in advance, shaped as the gateway's; the
CPU it spends choosing one (reading the request) is measured and taken off, so
what is left is the SDK's and httpx's share (with ``httpx.Response`` built as a
real transport would build it). The machine being shared, CPU time
(``time.process_time``) is measured, never wall time; the best of ``--repeat``
runs is reported.
"""

from __future__ import annotations

import argparse
import cProfile
import email.utils
import gc
import itertools
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import trio

from leasegate.client import AsyncJob, AsyncWorker, Client, Job, Worker

BASE = "http://gateway.test"
KEY = "lg_bench"
SITE, KIND = "bench", "echo"
LEASE_MAX, BATCH = 10, 100


class FakeGateway:
    """Canned answers shaped as the gateway's, and the CPU spent choosing them."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bytes]] = []  # to measure the fake's own CPU
        far = time.time() + 3600
        self.expires = _iso(far)
        self.date = email.utils.formatdate(time.time(), usegmt=True)
        self._n = 0
        self._submit_task = orjson.dumps({"task_id": "t", "status": "queued", "created": True})
        self._submit_query = orjson.dumps({"query_id": "q", "status": "queued",
                                           "created": True})
        self._started = orjson.dumps(self._started_obj("t"))
        self._task_done = orjson.dumps(self._task_object("t"))
        self._query_done = orjson.dumps(self._query_object("q"))
        self._by_count: dict[tuple[str, int], bytes] = {}

    def _started_obj(self, task_id: str) -> dict[str, Any]:
        return {"task_id": task_id, "status": "running", "lease_expires_at": self.expires,
                "cancel_requested": False, "pause_requested": False}

    def _task_object(self, task_id: str) -> dict[str, Any]:
        now = _iso(time.time())
        return {"task_id": task_id, "tenant": "t1", "site": SITE, "account": "a1",
                "kind": KIND, "params": {"n": 1}, "priority": 0, "status": "succeeded",
                "device_id": None, "batch_total": None, "progress": None,
                "lease_owner": None, "lease_expires_at": None, "attempts": 1,
                "cancel_requested": False, "pause_requested": False, "created_at": now,
                "updated_at": now, "started_at": now, "completed_at": now,
                "result": {"n": 1}, "error": None, "stale_reason": None, "reclaim": None,
                "billing": None, "late_result": False}

    def _query_object(self, query_id: str) -> dict[str, Any]:
        now = _iso(time.time())
        return {"query_id": query_id, "tenant": "t1", "site": SITE, "kind": KIND,
                "params": {"n": 1}, "status": "succeeded", "lease_owner": None,
                "lease_expires_at": None, "attempts": 1, "created_at": now,
                "updated_at": now, "completed_at": now, "result": {"n": 1}, "error": None,
                "billing": None}

    def _leases(self, channel: str, count: int) -> bytes:
        items = []
        for _ in range(count):
            self._n += 1
            if channel == "tasks":
                items.append({"task_id": f"t{self._n}", "site": SITE, "account": "a1",
                              "kind": KIND, "params": {"n": self._n}, "progress": None,
                              "attempt": 1, "lease_token": f"tok{self._n}",
                              "claim_expires_at": self.expires})
            else:
                items.append({"query_id": f"q{self._n}", "site": SITE, "kind": KIND,
                              "params": {"n": self._n}, "attempt": 1,
                              "lease_token": f"tok{self._n}",
                              "lease_expires_at": self.expires})
        return orjson.dumps({"items": items})

    def _many(self, what: str, count: int) -> bytes:
        """A batch reply of ``count`` items (made once per kind and count)."""
        key = (what, count)
        if key not in self._by_count:
            one: dict[str, Any] = {
                "submit task": {"status": 201, "task": orjson.loads(self._submit_task)},
                "submit query": {"status": 201, "query": orjson.loads(self._submit_query)},
                "start": {"status": 200, "task": self._started_obj("t")},
                "results tasks": {"status": 200, "task": self._task_object("t")},
                "results queries": {"status": 200, "query": self._query_object("q")},
            }[what]
            self._by_count[key] = orjson.dumps({"items": [one] * count})
        return self._by_count[key]

    def answer(self, method: str, path: str, content: bytes) -> bytes:
        self.requests.append((method, path, content))
        return self._answer(method, path, content)

    def own_cpu(self) -> float:
        """The CPU the fake spent answering, measured again by answering every request
        once more (``process_time`` is too slow here to wrap each request in it)."""
        requests, self.requests = self.requests, []
        began = time.process_time()
        for request in requests:
            self._answer(*request)
        return time.process_time() - began

    def _answer(self, method: str, path: str, content: bytes) -> bytes:
        parts = path.split("/")[2:]  # /v1/<channel>/...
        channel, rest = parts[0], parts[1:]
        if not rest:
            reply = self._submit_task if channel == "tasks" else self._submit_query
        elif rest == ["batch"]:
            count = len(orjson.loads(content)["items"])
            reply = self._many("submit task" if channel == "tasks" else "submit query", count)
        elif rest == ["lease"]:
            reply = self._leases(channel, int(orjson.loads(content)["max"]))
        elif rest == ["start"]:
            reply = self._many("start", len(orjson.loads(content)["items"]))
        elif rest == ["results"]:
            reply = self._many(f"results {channel}", len(orjson.loads(content)["items"]))
        elif rest[-1] == "start":
            reply = self._started
        elif rest[-1] == "result":
            reply = self._task_done if channel == "tasks" else self._query_done
        else:
            raise AssertionError(f"{method} {path}: not faked")
        return reply

    def headers(self, reply: bytes) -> list[tuple[str, str]]:
        # What hypercorn sends with a JSON reply.
        return [("content-type", "application/json"), ("content-length", str(len(reply))),
                ("date", self.date), ("server", "hypercorn-h11")]

    def sync_transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            reply = self.answer(request.method, request.url.path, request.content)
            return httpx.Response(200, headers=self.headers(reply), content=reply)

        return httpx.MockTransport(handle)

    def async_transport(self) -> httpx.AsyncBaseTransport:
        return _AsyncFake(self)


class _AsyncFake(httpx.AsyncBaseTransport):
    def __init__(self, fake: FakeGateway) -> None:
        self.fake = fake

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        content = await request.aread()
        await trio.lowlevel.checkpoint()  # a real transport waits for the reply
        reply = self.fake.answer(request.method, request.url.path, content)
        return httpx.Response(200, headers=self.fake.headers(reply), content=reply)


def _iso(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


# ---- the paths ---------------------------------------------------------------------------


def submit_one(channel: str, jobs: int) -> FakeGateway:
    fake = FakeGateway()
    with Client(BASE, KEY, transport=fake.sync_transport()) as client:
        for n in range(jobs):
            if channel == "tasks":
                client.submit_task(SITE, KIND, {"n": n}, account=f"a{n % 1000}")
            else:
                client.submit_query(SITE, KIND, {"n": n})
    return fake


def submit_many(channel: str, jobs: int) -> FakeGateway:
    fake = FakeGateway()
    id_field = "task_id" if channel == "tasks" else "query_id"
    with Client(BASE, KEY, transport=fake.sync_transport()) as client:
        many = client.submit_many_tasks if channel == "tasks" else client.submit_many_queries
        for start in range(0, jobs, BATCH):
            items: list[dict[str, Any]] = []
            for n in range(start, min(start + BATCH, jobs)):
                item: dict[str, Any] = {"site": SITE, "kind": KIND, "params": {"n": n},
                                        id_field: f"b{n}"}
                if channel == "tasks":
                    item["account"] = f"a{n % 1000}"
                items.append(item)
            many(items)
    return fake


def consume(channel: str, jobs: int, batched: bool) -> FakeGateway:
    fake = FakeGateway()

    async def main() -> None:
        worker = AsyncWorker(BASE, KEY, "w1", channel=channel,  # type: ignore[arg-type]
                             wait_seconds=1, transport=fake.async_transport(),
                             max=1 if batched else LEASE_MAX,
                             batch=BATCH if batched else 1)
        handled = 0

        async def handler(job: AsyncJob) -> dict[str, Any]:
            nonlocal handled
            handled += 1
            if handled >= jobs:
                worker.stop()
            return {"n": job.params.get("n")}

        async with worker:
            await worker.run(handler)

    trio.run(main)
    return fake


def consume_blocking(channel: str, jobs: int, batched: bool) -> FakeGateway:
    fake = FakeGateway()
    worker = Worker(BASE, KEY, "w1", channel=channel,  # type: ignore[arg-type]
                    wait_seconds=1, transport=fake.sync_transport(),
                    batch=BATCH if batched else 1)
    handled = itertools.count(1)  # handlers of a batch run in threads

    def handler(job: Job) -> dict[str, Any]:
        if next(handled) >= jobs:
            worker.stop()
        return {"n": job.params.get("n")}

    with worker:
        worker.run(handler)
    return fake


PATHS: dict[str, Callable[[int], FakeGateway]] = {
    "submit_query": lambda jobs: submit_one("queries", jobs),
    "submit_task": lambda jobs: submit_one("tasks", jobs),
    "submit_many_queries": lambda jobs: submit_many("queries", jobs),
    "submit_many_tasks": lambda jobs: submit_many("tasks", jobs),
    "worker queries max=10": lambda jobs: consume("queries", jobs, batched=False),
    "worker tasks max=10": lambda jobs: consume("tasks", jobs, batched=False),
    "worker queries batch=100": lambda jobs: consume("queries", jobs, batched=True),
    "worker tasks batch=100": lambda jobs: consume("tasks", jobs, batched=True),
    "Worker queries": lambda jobs: consume_blocking("queries", jobs, batched=False),
    "Worker tasks": lambda jobs: consume_blocking("tasks", jobs, batched=False),
    "Worker queries batch=100": lambda jobs: consume_blocking("queries", jobs, batched=True),
    "Worker tasks batch=100": lambda jobs: consume_blocking("tasks", jobs, batched=True),
}


def per_job_us(run: Callable[[int], FakeGateway], jobs: int) -> float:
    gc.collect()
    began = time.process_time()
    fake = run(jobs)
    spent = time.process_time() - began
    spent -= fake.own_cpu()
    return spent / jobs * 1e6


def construction_us(rounds: int = 50) -> tuple[float, float]:
    """CPU per ``Client`` and per ``AsyncWorker`` made for an http:// gateway."""
    began = time.process_time()
    for _ in range(rounds):
        Client(BASE, KEY).close()
    client = (time.process_time() - began) / rounds * 1e6

    async def workers() -> None:
        for _ in range(rounds):
            await AsyncWorker(BASE, KEY, "w1").aclose()

    began = time.process_time()
    trio.run(workers)
    worker = (time.process_time() - began) / rounds * 1e6
    return client, worker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", choices=sorted(PATHS), help="cProfile one path")
    args = parser.parse_args()
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(PATHS[args.profile], args.jobs)
        pstats.Stats(profile).sort_stats("tottime").print_stats(40)
        return 0
    for name, run in PATHS.items():
        run(min(args.jobs, 500))  # warm up (imports, caches)
        best = min(per_job_us(run, args.jobs) for _ in range(args.repeat))
        print(f"{name:<26} {best:8.1f} µs CPU/job", flush=True)
    client, worker = construction_us()
    print(f"{'Client(http://...)':<26} {client:8.0f} µs CPU each")
    print(f"{'AsyncWorker(http://...)':<26} {worker:8.0f} µs CPU each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
