"""The client SDK against an in-memory fake of the gateway's protocol.

:class:`FakeGateway` answers over ``httpx.MockTransport`` the way the gateway does
the gateway does (ids, fencing tokens, idempotent replays, the error
envelope), and can lose a request on the way in or its answer on the way
out. Async tests run under trio's autojump clock; the few sync ones use
lease lengths of a fraction of a second.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import logging
import re
import textwrap
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
import trio

import leasegate.client as sdk
from leasegate import errors as server_errors
from leasegate.client import (
    AsyncClient,
    AsyncJob,
    AsyncWorker,
    Canceled,
    Client,
    Failed,
    IdempotencyConflict,
    Job,
    LeasegateError,
    Paused,
    Retry,
    StateConflict,
    TaskNotFound,
    TransportError,
    Unauthorized,
    Worker,
)
from leasegate.client._errors import ERRORS_BY_CODE
from leasegate.clock import Clock

BASE = "http://gateway.test"
NO_PAUSE = Retry(attempts=3, backoff=0.0, max_backoff=0.0)  # sync tests never sleep
Body = dict[str, Any]


class FakeGateway:
    """The gateway's protocol in memory: tasks, queries, leases, fencing, faults."""

    def __init__(
        self,
        now: Callable[[], float] = time.time,
        *,
        lease_ttl: float = 30,
        claim_window: float = 30,
        date_header: bool = True,
        start_flags: bool = True,
        max_json_bytes: int = 64 * 1024,
    ) -> None:
        self.now = now
        self.lease_ttl = lease_ttl
        self.claim_window = claim_window
        self.date_header = date_header  # hypercorn sends one
        self.start_flags = start_flags  # False: an older gateway's start reply
        self.max_json_bytes = max_json_bytes
        self._after: list[tuple[str, str, Callable[[], None]]] = []
        self.tasks: dict[str, Body] = {}
        self.queries: dict[str, Body] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self._faults: list[tuple[str, str, str | int]] = []
        self._leases: dict[tuple[str, str], list[Body]] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        routes: list[tuple[str, str, Callable[..., tuple[int, Any]]]] = [
            ("POST", r"/v1/(tasks|queries)", self._submit),
            ("GET", r"/v1/(tasks|queries)", self._list),
            ("POST", r"/v1/(tasks|queries)/lease", self._lease),
            ("GET", r"/v1/(tasks|queries)/([^/]+)", self._get),
            ("POST", r"/v1/tasks/([^/]+)/cancel", self._cancel),
            ("POST", r"/v1/tasks/([^/]+)/start", self._start),
            ("POST", r"/v1/tasks/([^/]+)/renew", self._renew),
            ("POST", r"/v1/(tasks|queries)/([^/]+)/result", self._result),
            ("POST", r"/v1/devices/([^/]+)/heartbeat", self._heartbeat),
        ]
        self._routes = [(method, re.compile(pattern), fn) for method, pattern, fn in routes]

    # ---- test controls ----------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def fail(self, method: str, path: str, fault: str | int) -> None:
        """Spoil the next request to ``path`` (a regex): ``"drop_before"`` (never
        arrives), ``"drop_after"`` (applied, answer lost), ``"explode"`` (the transport
        raises something unexpected) or an HTTP status (429, 503)."""
        self._faults.append((method, path, fault))

    def after(self, method: str, path: str, action: Callable[[], None]) -> None:
        """Run ``action`` once, right after the next request to ``path`` was applied."""
        self._after.append((method, path, action))

    def bodies(self, method: str, path: str) -> list[Any]:
        """The bodies of the requests that reached the gateway, in order."""
        return [b for m, p, b in self.requests if m == method and re.fullmatch(path, p)]

    def add_task(self, task_id: str, **state: Any) -> None:
        """A queued task (then ``state`` written over it, e.g. a batch's progress)."""
        self._submit("tasks", {"task_id": task_id, "site": "shop", "kind": "order", "params": {}})
        self.tasks[task_id].update(state)

    def iso(self, wall: float) -> str:
        """API timestamps are whole seconds; a sub-second TTL needs the fraction."""
        moment = datetime.fromtimestamp(wall, UTC)
        if float(self.lease_ttl).is_integer():
            return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    # ---- transport --------------------------------------------------------------------

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            method, path = request.method, request.url.path
            body = json.loads(request.content) if request.content else None
            fault = self._take_fault(method, path)
            if fault == "drop_before":
                raise httpx.ConnectError("connection refused", request=request)
            if fault == "explode":
                raise RuntimeError("a bug somewhere below the SDK")
            self.requests.append((method, path, body))
            if isinstance(fault, int):
                error = (server_errors.RateLimited("slow down", **{"Retry-After": "7"})
                         if fault == 429 else server_errors.Unavailable("disk full"))  # fmt: skip
                return httpx.Response(error.status, json=error.envelope(), headers=error.headers)
            try:
                if request.headers["Authorization"] == "Bearer bad":
                    raise server_errors.Unauthorized("unknown key")
                status, reply = self._route(method, path, body, dict(request.url.params))
            except server_errors.LeasegateError as error:
                status, reply = error.status, error.envelope()
            for i, (m, pattern, action) in enumerate(self._after):
                if m == method and re.fullmatch(pattern, path):
                    del self._after[i]
                    action()
                    break
            if fault == "drop_after":
                raise httpx.ReadError("connection reset", request=request)
            headers = {"Date": email.utils.formatdate(self.now(), usegmt=True)}
            return httpx.Response(status, json=reply, headers=headers if self.date_header else {})

    def _take_fault(self, method: str, path: str) -> str | int | None:
        for i, (m, pattern, fault) in enumerate(self._faults):
            if m == method and re.fullmatch(pattern, path):
                del self._faults[i]
                return fault
        return None

    def _check_result(self, item: Body, body: Body) -> None:
        """What the gateway's routes refuse in a result (400 / 413)."""
        for name in ("result", "progress"):
            if body.get(name) is None:
                continue
            if _depth(body[name]) > 32:
                raise server_errors.InvalidRequest(f"{name} is nested deeper than 32 levels")
            size = len(json.dumps(body[name], separators=(",", ":"), ensure_ascii=False,
                                  allow_nan=False).encode())  # fmt: skip
            if size > self.max_json_bytes:
                raise server_errors.PayloadTooLarge(f"{name} is {size} bytes of JSON")
        cost, error = body.get("cost"), body.get("error") or {}
        if cost is not None and not (type(cost) is int and 0 <= cost <= 2**53):
            raise server_errors.InvalidRequest("cost")
        code = error.get("code")
        if code is not None and not (type(code) is int and -(2**31) <= code < 2**31):
            raise server_errors.InvalidRequest("error.code")
        if len(error.get("message", "")) > 4096:
            raise server_errors.InvalidRequest("error.message")
        if body["outcome"] == "paused" and item.get("batch_total") is None:
            raise server_errors.StateConflict("outcome paused is only for batch tasks")

    def _route(self, method: str, path: str, body: Any, args: dict[str, str]) -> tuple[int, Any]:
        for m, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if m == method and match:
                return handler(*match.groups(), body if method == "POST" else args)
        raise server_errors.NotFound(path)

    # ---- protocol ---------------------------------------------------------------------

    def _table(self, channel: str) -> dict[str, Body]:
        return self.tasks if channel == "tasks" else self.queries

    def _item(self, channel: str, item_id: str) -> Body:
        item = self._table(channel).get(item_id)
        if item is None:
            raise (server_errors.TaskNotFound if channel == "tasks"
                   else server_errors.QueryNotFound)(item_id)  # fmt: skip
        return item

    def _submit(self, channel: str, body: Body) -> tuple[int, Any]:
        id_field = "task_id" if channel == "tasks" else "query_id"
        item_id = body[id_field]
        table = self._table(channel)
        if item_id in table:
            if table[item_id]["submitted"] != body:
                raise server_errors.IdempotencyConflict(f"{item_id} was submitted differently")
            return 200, {id_field: item_id, "status": table[item_id]["status"], "created": False}
        stamp = self.iso(self.now())
        item: Body = {id_field: item_id, "tenant": "acme", "site": body["site"],
                      "kind": body["kind"], "params": body["params"], "status": "queued",
                      "lease_owner": None, "lease_expires_at": None, "attempts": 0,
                      "created_at": stamp, "updated_at": stamp, "completed_at": None,
                      "result": None, "error": None, "billing": None,
                      "submitted": body, "lease_token": None, "result_body": None}  # fmt: skip
        if channel == "tasks":
            item.update(account=body.get("account", "-"), priority=body.get("priority", 0),
                        device_id=body.get("device_id"), batch_total=body.get("batch_total"),
                        progress=None, cancel_requested=False,
                        pause_requested=False, started_at=None, stale_reason=None,
                        reclaim=None)  # fmt: skip
        table[item_id] = item
        return 201, {id_field: item_id, "status": "queued", "created": True}

    def _public(self, item: Body) -> Body:
        hidden = {"submitted", "lease_token", "result_body", "claim_expires"}
        return {k: v for k, v in item.items() if k not in hidden}

    def _get(self, channel: str, item_id: str, args: dict[str, str]) -> tuple[int, Any]:
        return 200, self._public(self._item(channel, item_id))

    def _list(self, channel: str, args: dict[str, str]) -> tuple[int, Any]:
        items = [
            self._public(i)
            for i in reversed(self._table(channel).values())
            if all(i.get(k) == v for k, v in args.items() if k not in ("limit", "offset"))
        ]
        return 200, {"items": items, "total": len(items), "limit": 50, "offset": 0}

    def _lease(self, channel: str, body: Body) -> tuple[int, Any]:
        key = (body["worker_id"], body.get("request_id") or f"none-{next(self._tokens)}")
        if key in self._leases:  # a retry: the same leases while still unstarted
            return 200, {"items": [lease for lease in self._leases[key]
                                   if self._item(channel, lease[f"{channel[:-1]}_id"])["status"]
                                   == "leased"]}  # fmt: skip
        sites = body.get("sites")
        ready = [
            i
            for i in self._table(channel).values()
            if i["status"] == "queued" and (sites is None or i["site"] in sites)
        ]
        leases = []
        for item in ready[: body.get("max", 1)]:
            item.update(status="leased", lease_owner=body["worker_id"],
                        lease_token=f"tok-{next(self._tokens)}",
                        attempts=item["attempts"] + 1)  # fmt: skip
            lease = {k: item[k] for k in ("site", "kind", "params", "lease_token")}
            if channel == "tasks":
                item["claim_expires"] = self.now() + self.claim_window
                lease.update(task_id=item["task_id"], account=item["account"],
                             progress=item["progress"], attempt=item["attempts"],
                             claim_expires_at=self.iso(item["claim_expires"]))  # fmt: skip
            else:
                item["lease_expires_at"] = self.iso(self.now() + self.lease_ttl)
                lease.update(query_id=item["query_id"], attempt=item["attempts"],
                             lease_expires_at=item["lease_expires_at"])  # fmt: skip
            leases.append(lease)
        self._leases[key] = leases
        return 200, {"items": leases}

    def _invalid(self, channel: str, message: str) -> server_errors.LeasegateError:
        if channel == "tasks":
            return server_errors.TaskLeaseInvalid(message)
        return server_errors.QueryLeaseInvalid(message)

    def _fenced(self, channel: str, item_id: str, body: Body) -> Body:
        item = self._item(channel, item_id)
        if (item["lease_owner"], item["lease_token"]) != (body["worker_id"], body["lease_token"]):
            raise self._invalid(channel, "not your lease")
        return item

    def _start(self, task_id: str, body: Body) -> tuple[int, Any]:
        task = self._fenced("tasks", task_id, body)
        if task["status"] == "leased" and self.now() > task["claim_expires"]:
            task.update(status="queued", lease_owner=None, lease_token=None)
            raise server_errors.TaskLeaseInvalid("claim window passed")
        if task["status"] == "leased":
            task.update(status="running", lease_expires_at=self.iso(self.now() + self.lease_ttl))
        elif task["status"] != "running":
            raise server_errors.TaskLeaseInvalid(f"task is {task['status']}")
        reply = {"task_id": task_id, "status": "running",
                 "lease_expires_at": task["lease_expires_at"]}  # fmt: skip
        if self.start_flags:
            reply.update(cancel_requested=task["cancel_requested"],
                         pause_requested=task["pause_requested"])  # fmt: skip
        return 200, reply

    def _renew(self, task_id: str, body: Body) -> tuple[int, Any]:
        task = self._fenced("tasks", task_id, body)
        if task["status"] != "running":
            raise server_errors.TaskLeaseInvalid(f"task is {task['status']}")
        if "progress" in body:
            task["progress"] = body["progress"]
        task["lease_expires_at"] = self.iso(self.now() + self.lease_ttl)
        return 200, {"lease_expires_at": task["lease_expires_at"],
                     "cancel_requested": task["cancel_requested"],
                     "pause_requested": task["pause_requested"]}  # fmt: skip

    def _result(self, channel: str, item_id: str, body: Body) -> tuple[int, Any]:
        item = self._fenced(channel, item_id, body)
        self._check_result(item, body)
        if item["result_body"] is not None:  # finished: a replay, or a different ending
            if item["result_body"] != body:
                raise self._invalid(channel, "finished with another outcome")
            return 200, self._public(item)
        if item["status"] not in (("running", "stale") if channel == "tasks" else ("leased",)):
            raise self._invalid(channel, f"{channel[:-1]} is {item['status']}")
        item.update(status=body["outcome"], result=body.get("result"), error=body.get("error"),
                    result_body=body, completed_at=self.iso(self.now()))  # fmt: skip
        if "progress" in body:
            item["progress"] = body["progress"]
        return 200, self._public(item)

    def _cancel(self, task_id: str, body: Any) -> tuple[int, Any]:
        task = self._item("tasks", task_id)
        if task["status"] in ("queued", "leased", "paused"):
            task.update(status="canceled", lease_owner=None, lease_token=None)
        elif task["status"] == "running":
            task["cancel_requested"] = True
        else:
            raise server_errors.StateConflict(f"task is {task['status']}")
        return 200, self._public(task)

    def _heartbeat(self, device_id: str, body: Any) -> tuple[int, Any]:
        return 200, {"device_id": device_id, "state": "online", "resumed": 0}


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def one_task(task_id: str = "t1", **state: Any) -> FakeGateway:
    """A fake gateway on the test's (virtual) clock with one queued task."""
    gateway = FakeGateway(Clock().now)
    gateway.add_task(task_id, **state)
    return gateway


def three_lanes() -> FakeGateway:
    """A fake gateway with tasks t1, t2 and t3 queued, each on an account of its own."""
    gateway = FakeGateway(Clock().now)
    for task_id, account in (("t1", "a"), ("t2", "b"), ("t3", "c")):
        gateway.add_task(task_id, account=account)
    return gateway


def async_worker(gateway: FakeGateway, **options: Any) -> AsyncWorker:
    return AsyncWorker(BASE, "lg_worker", "w1", transport=gateway.transport(), **options)


def sync_worker(gateway: FakeGateway, **options: Any) -> Worker:
    return Worker(BASE, "lg_worker", "w1", transport=gateway.transport(), retry=NO_PAUSE,
                  **options)  # fmt: skip


# ---- upstream client --------------------------------------------------------------------


def test_a_submit_whose_answer_was_lost_is_replayed_with_the_same_id() -> None:
    gateway = FakeGateway()
    gateway.fail("POST", "/v1/tasks", "drop_after")
    with Client(BASE, "lg_client", transport=gateway.transport(), retry=NO_PAUSE) as client:
        reply = client.submit_task("shop", "order", {"sku": "A1"}, account="alice", priority=5,
                                   not_before=datetime(2026, 11, 30, 8, 0))  # fmt: skip
    first, second = gateway.bodies("POST", "/v1/tasks")
    assert first == second
    assert len(first["task_id"]) >= 16  # at least 64 random bits, in hex
    assert first["not_before"] == "2026-11-30T08:00:00Z"
    assert reply == {"task_id": first["task_id"], "status": "queued", "created": False}
    assert list(gateway.tasks) == [first["task_id"]]


async def test_async_submit_query_is_retried_through_a_503(autojump_clock: Any) -> None:
    gateway = FakeGateway(Clock().now)
    gateway.fail("POST", "/v1/queries", 503)
    async with AsyncClient(BASE, "lg_client", transport=gateway.transport()) as client:
        reply = await client.submit_query("shop", "balance", {}, query_id="q1")
        assert reply == {"query_id": "q1", "status": "queued", "created": True}
        assert len(gateway.bodies("POST", "/v1/queries")) == 2
        assert (await client.get_query("q1"))["status"] == "queued"
        assert (await client.list_queries(status="queued"))["total"] == 1
        assert (await client.heartbeat_device("phone-1"))["state"] == "online"


async def test_rate_limited_calls_wait_for_retry_after(autojump_clock: Any) -> None:
    gateway = one_task()
    gateway.fail("GET", "/v1/tasks/t1", 429)
    async with AsyncClient(BASE, "lg_client", transport=gateway.transport()) as client:
        began = trio.current_time()
        assert (await client.get_task("t1"))["task_id"] == "t1"
        assert trio.current_time() - began >= 7


def test_error_envelopes_raise_their_class_and_are_not_retried() -> None:
    gateway = FakeGateway()
    with Client(BASE, "lg_client", transport=gateway.transport(), retry=NO_PAUSE) as client:
        with pytest.raises(TaskNotFound) as caught:
            client.get_task("nope")
        client.submit_task("shop", "order", {"n": 1}, task_id="t1")
        with pytest.raises(IdempotencyConflict) as conflict:
            client.submit_task("shop", "order", {"n": 2}, task_id="t1")
    error = caught.value
    assert (error.status, error.code, error.type, error.message) == (
        404, 6001, "task_not_found", "nope")  # fmt: skip
    assert isinstance(error, LeasegateError) and error.attempts == 1
    assert conflict.value.code == 6004
    assert len(gateway.bodies("GET", "/v1/tasks/nope")) == 1


def test_an_unreachable_gateway_raises_transport_error_after_the_retries() -> None:
    gateway = FakeGateway()
    for _ in range(3):
        gateway.fail("GET", "/v1/tasks/t1", "drop_before")
    client = Client(BASE, "lg_client", transport=gateway.transport(), retry=NO_PAUSE)
    with client, pytest.raises(TransportError) as caught:
        client.get_task("t1")
    assert caught.value.attempts == 3
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_a_cancel_whose_answer_was_lost_returns_the_canceled_task() -> None:
    gateway = FakeGateway()
    gateway.add_task("t1")
    gateway.add_task("t2", status="succeeded")
    gateway.fail("POST", "/v1/tasks/t1/cancel", "drop_after")
    with Client(BASE, "lg_client", transport=gateway.transport(), retry=NO_PAUSE) as client:
        assert client.cancel_task("t1")["status"] == "canceled"
        with pytest.raises(StateConflict):  # a finished task, first try: the plain answer
            client.cancel_task("t2")
        assert client.wait_task("t1")["status"] == "canceled"
        assert [t["task_id"] for t in client.list_tasks()["items"]] == ["t2", "t1"]


def test_the_error_classes_match_the_servers_codes() -> None:
    for server_class in server_errors.ALL_ERRORS:
        client_class = getattr(sdk, server_class.__name__)
        assert ERRORS_BY_CODE[server_class.code] is client_class
        summary = f"{server_class.code} ({server_class.status})"
        assert (client_class.__doc__ or "").startswith(summary)


# ---- async worker -----------------------------------------------------------------------


async def test_a_lease_lost_in_transit_is_asked_again_with_the_same_request_id(
    autojump_clock: Any,
) -> None:
    gateway = one_task()
    gateway.add_task("t2")
    gateway.fail("POST", "/v1/tasks/lease", "drop_after")
    ran: list[str] = []

    async def handler(job: AsyncJob) -> dict[str, Any]:
        ran.append(job.id)
        return {"order_no": f"A-{job.id}"}

    worker = async_worker(gateway, sites=["shop"])
    assert await worker.run_once(handler) == 1
    assert await worker.run_once(handler) == 1
    first, retry, second = gateway.bodies("POST", "/v1/tasks/lease")
    assert first == retry and first["request_id"] != second["request_id"]
    assert first["sites"] == ["shop"] and first["worker_id"] == "w1"
    assert ran == ["t1", "t2"]
    assert gateway.tasks["t1"]["status"] == "succeeded"
    assert gateway.tasks["t1"]["result"] == {"order_no": "A-t1"}


async def test_a_refused_start_means_the_handler_never_runs(autojump_clock: Any) -> None:
    gateway = FakeGateway(Clock().now, claim_window=-1)  # every claim has already expired
    gateway.add_task("t1")
    ran: list[str] = []

    async def handler(job: AsyncJob) -> None:
        ran.append(job.id)

    assert await async_worker(gateway).run_once(handler) == 0
    assert ran == []
    assert gateway.bodies("POST", "/v1/tasks/t1/result") == []
    assert gateway.tasks["t1"]["status"] == "queued"


async def test_a_lost_result_is_sent_again_identically_and_the_handler_ran_once(
    autojump_clock: Any,
) -> None:
    gateway = one_task()
    gateway.fail("POST", "/v1/tasks/t1/result", "drop_after")  # applied, answer lost
    gateway.fail("POST", "/v1/tasks/t1/result", "drop_before")
    gateway.fail("POST", "/v1/tasks/t1/result", 503)
    ran: list[str] = []

    async def handler(job: AsyncJob) -> dict[str, Any]:
        ran.append(job.id)
        job.cost = 3
        return {"order_no": "A1"}

    assert await async_worker(gateway).run_once(handler) == 1
    assert ran == ["t1"]
    bodies = gateway.bodies("POST", "/v1/tasks/t1/result")
    assert len(bodies) == 3 and all(body == bodies[0] for body in bodies)
    assert bodies[0]["outcome"] == "succeeded" and bodies[0]["cost"] == 3
    assert gateway.tasks["t1"]["status"] == "succeeded"


async def test_start_is_retried_with_the_same_token(autojump_clock: Any) -> None:
    gateway = one_task()
    gateway.fail("POST", "/v1/tasks/t1/start", "drop_after")

    async def handler(job: AsyncJob) -> None:
        return None

    assert await async_worker(gateway).run_once(handler) == 1
    first, second = gateway.bodies("POST", "/v1/tasks/t1/start")
    assert first == second
    assert gateway.tasks["t1"]["status"] == "succeeded"


async def test_a_cancel_request_reaches_the_running_handler(autojump_clock: Any) -> None:
    gateway = FakeGateway(Clock().now, lease_ttl=30)
    async with AsyncClient(BASE, "lg_client", transport=gateway.transport()) as client:
        task_id = (await client.submit_task("shop", "order", {}))["task_id"]

        async def handler(job: AsyncJob) -> Canceled:
            await client.cancel_task(job.id)  # the upstream changes its mind mid-order
            assert not job.cancel_requested
            with anyio.fail_after(60):
                await job.wait_cancel_or_pause()  # the next renewal brings the request
            assert job.cancel_requested and not job.pause_requested
            return Canceled("customer canceled", result={"placed": 0})

        assert await async_worker(gateway).run_once(handler) == 1
        task = await client.wait_task(task_id)
    assert task["status"] == "canceled"
    assert task["error"] is not None and task["error"]["message"] == "customer canceled"
    assert task["result"] == {"placed": 0}
    assert len(gateway.bodies("POST", f"/v1/tasks/{task_id}/renew")) == 1


async def test_progress_rides_on_renewals_and_pause_ends_the_batch(autojump_clock: Any) -> None:
    gateway = FakeGateway(Clock().now, lease_ttl=30)
    gateway.add_task("b1", batch_total=10, progress={"done": 3})
    seen: list[Any] = []

    async def handler(job: AsyncJob) -> Paused:
        seen.append(job.progress)
        job.set_progress({"done": 4})
        await anyio.sleep(15)  # a renewal at ~10 s carries {"done": 4}
        job.set_progress({"done": 5})
        gateway.tasks["b1"]["pause_requested"] = True  # the device went away
        await job.wait_cancel_or_pause()
        return Paused({"done": 6})

    assert await async_worker(gateway).run_once(handler) == 1
    assert seen == [{"done": 3}]
    renewals = [body["progress"] for body in gateway.bodies("POST", "/v1/tasks/b1/renew")]
    assert renewals[:2] == [{"done": 4}, {"done": 5}]
    (result,) = gateway.bodies("POST", "/v1/tasks/b1/result")
    assert result["outcome"] == "paused" and result["progress"] == {"done": 6}
    assert gateway.tasks["b1"]["status"] == "paused"


async def test_a_handler_exception_is_reported_as_failed(autojump_clock: Any) -> None:
    gateway = one_task()
    gateway.add_task("t2", account="bob")  # another lane: both run at once

    async def handler(job: AsyncJob) -> None:
        if job.id == "t1":
            raise ValueError("boom")
        raise Failed("out of stock", code=17)

    worker = async_worker(gateway, max=2)
    assert await worker.run_once(handler) == 2
    assert gateway.tasks["t1"]["status"] == "failed"
    error = gateway.tasks["t1"]["error"]
    assert (error["type"], error["message"]) == ("ValueError", "boom")
    assert error["traceback"].startswith("Traceback (most recent call last):\n")
    assert 'raise ValueError("boom")' in error["traceback"]
    assert error["traceback"].endswith("ValueError: boom\n")
    assert gateway.tasks["t2"]["error"] == {"message": "out of stock", "code": 17}


async def test_the_async_worker_starts_a_whole_batch_at_once_and_runs_it_concurrently(
    autojump_clock: Any,
) -> None:
    gateway = FakeGateway(Clock().now, claim_window=30, lease_ttl=30)
    for task_id, account in (("t1", "alice"), ("t2", "bob"), ("t3", "carol")):
        gateway.add_task(task_id, account=account)  # three lanes
    began = trio.current_time()
    started_after: dict[str, float] = {}
    running = 0
    most_at_once = 0

    async def handler(job: AsyncJob) -> dict[str, Any]:
        nonlocal running, most_at_once
        started_after[job.id] = trio.current_time() - began
        running += 1
        most_at_once = max(most_at_once, running)
        await trio.sleep(45)  # longer than the claim window: one after another would fail
        running -= 1
        return {"order_no": job.id}

    assert await async_worker(gateway, max=3).run_once(handler) == 3
    assert trio.current_time() - began < 60  # together, not 3 × 45 s
    assert most_at_once == 3
    assert sorted(started_after) == ["t1", "t2", "t3"]
    assert all(after < 1 for after in started_after.values())  # well within the claim window
    for task_id in ("t1", "t2", "t3"):
        assert len(gateway.bodies("POST", f"/v1/tasks/{task_id}/start")) == 1
        assert gateway.bodies("POST", f"/v1/tasks/{task_id}/renew")  # each renews its own
        assert gateway.tasks[task_id]["status"] == "succeeded"


async def test_a_lost_lease_is_signalled_and_the_result_still_offered(
    autojump_clock: Any,
) -> None:
    gateway = one_task()

    async def handler(job: AsyncJob) -> dict[str, Any]:
        gateway.tasks["t1"]["status"] = "stale"  # e.g. the lease ran out during a partition
        await job.wait_cancel_or_pause()
        assert job.lease_lost and not job.cancel_requested
        return {"order_no": "A1"}

    assert await async_worker(gateway).run_once(handler) == 1
    # A stale task takes the result of its last lease: the worker knows best.
    assert gateway.tasks["t1"]["status"] == "succeeded"


async def test_queries_lease_handle_and_report(autojump_clock: Any) -> None:
    gateway = FakeGateway(Clock().now)
    worker = async_worker(gateway, channel="queries")

    async def handler(job: AsyncJob) -> dict[str, Any]:
        assert job.account is None and job.lease_expires_at is not None
        if job.params.get("broken"):
            raise RuntimeError("site down")
        return {"balance": 42}

    async with AsyncClient(BASE, "lg_client", transport=gateway.transport()) as client:
        await client.submit_query("shop", "balance", {}, query_id="q1")
        await client.submit_query("shop", "balance", {"broken": True}, query_id="q2")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run_once, handler)
            with trio.fail_after(60):
                q1 = await client.wait_query("q1")
        assert await worker.run_once(handler) == 1
        q2 = await client.get_query("q2")
    assert (q1["status"], q1["result"]) == ("succeeded", {"balance": 42})
    error = q2["error"]
    assert error is not None
    assert (q2["status"], error["type"], error["message"]) == ("failed", "RuntimeError",
                                                               "site down")
    assert "progress" not in gateway.bodies("POST", "/v1/queries/q1/result")[0]


async def test_run_handles_jobs_until_stopped(autojump_clock: Any) -> None:
    gateway = one_task()
    worker = async_worker(gateway, wait_seconds=0)
    ran: list[str] = []

    async def handler(job: AsyncJob) -> None:
        ran.append(job.id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, handler)
        await trio.sleep(10)  # idle: about one empty lease call a second, no spinning
        gateway.add_task("t2")
        await trio.sleep(10)
        worker.stop()
    assert ran == ["t1", "t2"]
    assert 10 <= len(gateway.bodies("POST", "/v1/tasks/lease")) <= 25


async def test_a_bad_key_on_lease_is_raised(autojump_clock: Any) -> None:
    worker = AsyncWorker(BASE, "bad", "w1", transport=FakeGateway(Clock().now).transport())

    async def handler(job: AsyncJob) -> None:
        raise AssertionError("never")

    with pytest.raises(Unauthorized):
        await worker.run(handler)


def test_the_async_worker_runs_under_asyncio() -> None:
    gateway = FakeGateway()
    gateway.add_task("t1")

    async def handler(job: AsyncJob) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        return {"loop": "asyncio"}

    async def main() -> int:
        async with async_worker(gateway) as worker:
            return await worker.run_once(handler)

    assert asyncio.run(main()) == 1
    assert gateway.tasks["t1"]["result"] == {"loop": "asyncio"}


# ---- sync worker --------------------------------------------------------------------------


def test_the_sync_worker_renews_in_the_background_with_progress_and_cancel() -> None:
    gateway = FakeGateway(lease_ttl=0.3)  # real time: a renewal every ~0.1 s
    with Client(BASE, "lg_client", transport=gateway.transport(), retry=NO_PAUSE) as client:
        task_id = client.submit_task("shop", "order", {})["task_id"]

        def handler(job: Job) -> Canceled:
            job.set_progress({"step": 1})
            client.cancel_task(job.id)
            assert job.wait_cancel_or_pause(timeout=2)
            return Canceled("asked to")

        with sync_worker(gateway) as worker:
            assert worker.run_once(handler) == 1
        assert client.get_task(task_id)["status"] == "canceled"
    renewals = gateway.bodies("POST", f"/v1/tasks/{task_id}/renew")
    assert renewals and renewals[0]["progress"] == {"step": 1}


def test_the_sync_worker_resends_a_lost_result_and_never_reruns_the_handler() -> None:
    gateway = FakeGateway()
    gateway.add_task("t1")
    gateway.add_task("t2")
    gateway.fail("POST", "/v1/tasks/t1/result", "drop_after")
    gateway.fail("POST", "/v1/tasks/t1/result", "drop_before")
    ran: list[str] = []

    def handler(job: Job) -> dict[str, Any]:
        ran.append(job.id)
        return {"order_no": job.id}

    with sync_worker(gateway) as worker:
        assert worker.run_once(handler) == 1
        assert worker.run_once(handler) == 1
    assert ran == ["t1", "t2"]
    first, *rest = gateway.bodies("POST", "/v1/tasks/t1/result")
    assert len(rest) == 1 and rest[0] == first
    assert gateway.tasks["t1"]["status"] == gateway.tasks["t2"]["status"] == "succeeded"


@pytest.mark.parametrize("channel", ["tasks", "queries"])
def test_the_sync_worker_leases_only_what_it_can_run_at_once(channel: str) -> None:
    """Run one after the other, a second job of a lease call would hold its lane
    unstarted until the claim window ran out: the sync worker leases one at a time."""
    gateway = FakeGateway()
    with pytest.raises(ValueError, match="AsyncWorker"):
        sync_worker(gateway, channel=channel, max=2)
    gateway.add_task("t1")
    gateway.add_task("t2", account="bob")
    with sync_worker(gateway) as worker:
        assert worker.run_once(lambda job: None) == 1
    assert [body["max"] for body in gateway.bodies("POST", "/v1/tasks/lease")] == [1]
    assert gateway.tasks["t2"]["status"] == "queued"  # not claimed while t1 ran


def test_the_sync_worker_skips_a_task_whose_start_is_refused() -> None:
    gateway = FakeGateway(claim_window=-1)
    gateway.add_task("t1")
    ran: list[str] = []
    with sync_worker(gateway) as worker:
        assert worker.run_once(lambda job: ran.append(job.id)) == 0
    assert ran == [] and gateway.tasks["t1"]["status"] == "queued"


def test_the_readme_worker_example_works() -> None:
    """The module docstring's worker (copied into README), with a fake ``checkout``."""
    example = textwrap.dedent((sdk.__doc__ or "").split("::\n\n", 1)[1].split("\nUpstream")[0])
    code, run_line = example.split("worker = Worker(")
    assert len(example.strip().splitlines()) < 30 and "run(place_orders)" in run_line
    namespace: dict[str, Any] = {}
    exec(compile(code, "README example", "exec"), namespace)
    placed: list[str] = []

    def checkout(account: str | None, item: str) -> str:
        placed.append(item)
        return f"no-{len(placed)}"

    namespace["checkout"] = checkout
    gateway = FakeGateway()
    gateway.add_task("b1", params={"items": ["a", "b", "c"]}, progress={"done": 1})
    with sync_worker(gateway) as worker:
        assert worker.run_once(namespace["place_orders"]) == 1
    assert placed == ["b", "c"]
    task = gateway.tasks["b1"]
    assert (task["status"], task["result"], task["progress"]) == (
        "succeeded",
        {"orders": ["no-1", "no-2"]},
        {"done": 3},
    )
    assert gateway.bodies("POST", "/v1/tasks/b1/result")[0]["cost"] == 2


# ---- results the gateway would refuse: made acceptable, the outcome kept ---------------


def _nested(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


FITS = 64 * 1024 - len('{"blob":""}')  # a string this long makes exactly 64 KiB of JSON


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ({"price": float("nan")}, "not JSON"),
        ({"price": float("-inf")}, "not JSON"),
        ({"at": datetime(2026, 11, 30)}, "not JSON"),
        ({"name": "bad \ud800 surrogate"}, "not JSON"),
        (_nested(33), "nested deeper than 32 levels"),
        ({"blob": "x" * (FITS + 1)}, "65537 bytes of JSON"),
        (_nested(32), None),
        ({"blob": "x" * FITS}, None),
    ],
)
async def test_a_result_the_gateway_would_refuse_is_replaced_and_the_outcome_kept(
    result: Any, why: str | None, autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = one_task()

    async def handler(job: AsyncJob) -> Any:
        job.cost = 3
        return result  # the order was placed: it must not look failed

    assert await async_worker(gateway).run_once(handler) == 1
    task = gateway.tasks["t1"]
    assert task["status"] == "succeeded" and task["result_body"]["cost"] == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "t1" in r.message]
    if why is None:
        assert task["result"] == result and not warnings
    else:
        (note,) = task["result"].values()
        assert list(task["result"]) == ["leasegate_sdk"] and note.startswith("result not sent: ")
        assert why in note and len(note) < 300
        assert any(why in r.message for r in warnings)


async def test_a_failure_keeps_its_outcome_and_message_while_bad_fields_are_fixed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = three_lanes()
    endings: dict[str, Any] = {
        "t1": Failed("x" * 5000, code=2**31, result={"n": float("nan")}, cost=-1),
        "t2": Failed("sold out", code=-(2**31), cost=2.0),  # type: ignore[arg-type]
        "t3": Canceled("stopped", cost=True),
    }

    async def handler(job: AsyncJob) -> Any:
        return endings[job.id]

    assert await async_worker(gateway, max=3).run_once(handler) == 3
    t1, t2, t3 = (gateway.tasks[t]["result_body"] for t in ("t1", "t2", "t3"))
    assert t1["outcome"] == "failed" and "cost" not in t1
    assert t1["error"] == {"message": "x" * 4095 + "…"}  # no code: 2**31 is out of range
    assert t1["result"]["leasegate_sdk"].startswith("result not sent: not JSON")
    assert t2["error"] == {"message": "sold out", "code": -(2**31)} and t2["cost"] == 2
    assert t3["outcome"] == "canceled" and "cost" not in t3
    warned = " ".join(r.message for r in caplog.records if r.levelno == logging.WARNING)
    assert "cut to 4096" in warned and "error code 2147483648 left out" in warned
    assert "cost -1 left out" in warned and "cost True left out" in warned


async def test_a_checkpoint_the_gateway_would_refuse_is_not_stored(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = FakeGateway(Clock().now, lease_ttl=30)
    gateway.add_task("b1", batch_total=10)

    async def handler(job: AsyncJob) -> dict[str, Any]:
        job.set_progress({"done": 4})
        job.set_progress({"done": float("nan")})  # not raised: the orders were placed
        assert job.progress == {"done": 4}
        await anyio.sleep(15)  # a renewal at 10 s carries the last good checkpoint
        return {"orders": 4}

    assert await async_worker(gateway).run_once(handler) == 1
    assert [b["progress"] for b in gateway.bodies("POST", "/v1/tasks/b1/renew")] == [{"done": 4}]
    assert gateway.tasks["b1"]["status"] == "succeeded"
    assert gateway.tasks["b1"]["progress"] == {"done": 4}
    assert any("checkpoint not stored" in r.message for r in caplog.records)


async def test_a_pause_whose_checkpoint_cannot_be_sent_is_reported_failed(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Resuming from an older checkpoint would place orders again: failed, not paused."""
    gateway = one_task("b1", batch_total=10)

    async def handler(job: AsyncJob) -> Paused:
        job.set_progress({"done": 2})
        return Paused({"done": 5, "ratio": float("inf")})

    assert await async_worker(gateway).run_once(handler) == 1
    task = gateway.tasks["b1"]
    assert task["status"] == "failed" and task["progress"] == {"done": 2}
    assert task["error"]["message"].startswith("paused, but the checkpoint could not be sent")
    assert any(r.levelno == logging.ERROR and "b1" in r.message for r in caplog.records)


async def test_paused_on_a_task_that_is_no_batch_is_left_to_an_operator(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = one_task()

    async def handler(job: AsyncJob) -> Paused:
        return Paused({"done": 1})

    assert await async_worker(gateway).run_once(handler) == 1
    assert len(gateway.bodies("POST", "/v1/tasks/t1/result")) == 1  # a 400 is not retried
    assert gateway.tasks["t1"]["status"] == "running"
    errors = [r.message for r in caplog.records if r.levelno == logging.ERROR]
    assert any("only a batch task can pause" in m and "operator" in m for m in errors)


async def test_a_result_over_a_smaller_gateway_limit_is_sent_again_without_its_bulk(
    autojump_clock: Any,
) -> None:
    gateway = FakeGateway(Clock().now, max_json_bytes=100)  # max_json_field_bytes lowered
    gateway.add_task("t1")

    async def handler(job: AsyncJob) -> dict[str, Any]:
        job.cost = 1
        return {"receipt": "x" * 200}

    assert await async_worker(gateway).run_once(handler) == 1
    first, second = gateway.bodies("POST", "/v1/tasks/t1/result")
    assert first["result"] == {"receipt": "x" * 200}
    assert second["outcome"] == "succeeded" and second["cost"] == 1
    assert second["result"]["leasegate_sdk"].startswith("result not sent: the gateway refused")
    assert gateway.tasks["t1"]["status"] == "succeeded"


async def test_trouble_reporting_one_job_never_cancels_or_skips_its_siblings(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = three_lanes()
    gateway.fail("POST", "/v1/tasks/t2/result", "explode")
    finished: list[str] = []

    async def handler(job: AsyncJob) -> dict[str, Any]:
        if job.id == "t1":
            return {"price": float("nan")}  # used to crash the worker, and cancel t3
        if job.id == "t3":
            await anyio.sleep(45)
        finished.append(job.id)
        return {"order_no": job.id}

    assert await async_worker(gateway, max=3).run_once(handler) == 3
    assert finished == ["t2", "t3"]
    assert gateway.tasks["t1"]["status"] == gateway.tasks["t3"]["status"] == "succeeded"
    assert gateway.tasks["t2"]["status"] == "running"  # its report blew up: logged
    assert any("t2: could not report" in r.message for r in caplog.records)


def test_the_sync_worker_reports_a_nan_result_as_succeeded() -> None:
    gateway = FakeGateway()
    gateway.add_task("t1")
    gateway.add_task("t2")
    with sync_worker(gateway) as worker:
        assert worker.run_once(lambda job: {"total": float("nan")}) == 1
        assert worker.run_once(lambda job: {"total": 1}) == 1
    assert gateway.tasks["t1"]["status"] == gateway.tasks["t2"]["status"] == "succeeded"
    assert "leasegate_sdk" in gateway.tasks["t1"]["result"]


# ---- start: control flags, and a start that was never confirmed ------------------------


async def test_a_cancel_in_the_start_reply_means_the_handler_never_runs(
    autojump_clock: Any,
) -> None:
    gateway = one_task()
    gateway.fail("POST", "/v1/tasks/t1/start", "drop_after")  # started, the answer lost...
    gateway.after("POST", "/v1/tasks/t1/start",
                  lambda: gateway.tasks["t1"].update(cancel_requested=True))  # fmt: skip
    ran: list[str] = []

    async def handler(job: AsyncJob) -> None:
        ran.append(job.id)

    assert await async_worker(gateway).run_once(handler) == 0
    assert ran == [] and len(gateway.bodies("POST", "/v1/tasks/t1/start")) == 2
    task = gateway.tasks["t1"]
    assert task["status"] == "canceled" and task["error"] == {"message": "canceled before it ran"}


@pytest.mark.parametrize("start_flags", [True, False])
async def test_a_pause_in_the_start_reply_is_on_the_job_before_the_handler_runs(
    start_flags: bool, autojump_clock: Any
) -> None:
    gateway = FakeGateway(Clock().now, start_flags=start_flags)  # False: an older gateway
    gateway.add_task("b1", batch_total=5, pause_requested=True)
    seen: list[bool] = []

    async def handler(job: AsyncJob) -> Paused:
        seen.append(job.pause_requested)
        return Paused({"done": 0})

    assert await async_worker(gateway).run_once(handler) == 1
    assert seen == [start_flags]
    assert gateway.tasks["b1"]["status"] == "paused"


async def test_a_start_that_took_effect_unconfirmed_is_reported_not_executed(
    autojump_clock: Any,
) -> None:
    gateway = one_task()
    gateway.fail("POST", "/v1/tasks/t1/start", "drop_after")  # it started...
    for _ in range(4):  # ...and every answer after that was lost: retries used up
        gateway.fail("POST", "/v1/tasks/t1/start", "drop_before")
    gateway.fail("POST", "/v1/tasks/t1/result", 503)  # the report is retried too
    ran: list[str] = []

    async def handler(job: AsyncJob) -> None:
        ran.append(job.id)

    assert await async_worker(gateway).run_once(handler) == 0
    assert ran == []
    first, second = gateway.bodies("POST", "/v1/tasks/t1/result")
    assert first == second and first["lease_token"] == gateway.tasks["t1"]["lease_token"]
    task = gateway.tasks["t1"]
    assert task["status"] == "failed"
    assert task["error"] == {"message": "not executed: the worker could not confirm start"}


async def test_a_start_that_never_arrived_is_left_to_its_claim(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "leasegate.client")
    gateway = one_task()
    for _ in range(5):
        gateway.fail("POST", "/v1/tasks/t1/start", "drop_before")

    async def handler(job: AsyncJob) -> None:
        raise AssertionError("never")

    assert await async_worker(gateway).run_once(handler) == 0
    assert len(gateway.bodies("POST", "/v1/tasks/t1/result")) == 1  # 409: never started
    assert gateway.tasks["t1"]["status"] == "leased"  # the claim runs out by itself
    assert any("never took effect" in r.message for r in caplog.records)


def test_the_sync_worker_reports_an_unconfirmed_start_not_executed() -> None:
    gateway = FakeGateway()
    gateway.add_task("t1")
    gateway.fail("POST", "/v1/tasks/t1/start", "drop_after")
    gateway.fail("POST", "/v1/tasks/t1/start", "drop_before")
    gateway.fail("POST", "/v1/tasks/t1/start", 503)  # NO_PAUSE: 3 tries in all
    ran: list[str] = []
    with sync_worker(gateway) as worker:
        assert worker.run_once(lambda job: ran.append(job.id)) == 0
    assert ran == [] and gateway.tasks["t1"]["status"] == "failed"
    assert gateway.tasks["t1"]["error"]["message"].startswith("not executed")


# ---- renew timing: the gateway's clock, measured on the local monotonic one ------------


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
async def test_renewals_do_not_depend_on_the_workers_wall_clock(
    skew: float, autojump_clock: Any
) -> None:
    clock = Clock()
    gateway = FakeGateway(clock.now, lease_ttl=30)
    gateway.add_task("t1")

    async def handler(job: AsyncJob) -> None:
        await anyio.sleep(45)

    # An hour behind once renewed only after 20 minutes (the lease long lost); an hour
    # ahead renewed every second. By the gateway's Date: at 10, 20, 30 and 40 s.
    worker = async_worker(gateway, wall_clock=lambda: clock.now() + skew)
    assert await worker.run_once(handler) == 1
    assert len(gateway.bodies("POST", "/v1/tasks/t1/renew")) == 4
    assert gateway.tasks["t1"]["status"] == "succeeded"


async def test_without_a_date_header_renewals_fall_back_to_the_wall_clock(
    autojump_clock: Any,
) -> None:
    gateway = FakeGateway(Clock().now, lease_ttl=30, date_header=False)
    gateway.add_task("t1")

    async def handler(job: AsyncJob) -> None:
        await anyio.sleep(45)

    assert await async_worker(gateway).run_once(handler) == 1
    assert len(gateway.bodies("POST", "/v1/tasks/t1/renew")) == 4


async def test_a_handler_reads_a_jobs_id_by_the_apis_names_too(autojump_clock: Any) -> None:
    """``job.id`` is the task's or query's id; the API's names for it work as well, and
    the other channel's name says which field to use instead of a bare AttributeError."""
    seen: list[tuple[str, str]] = []

    async def handler(job: AsyncJob) -> None:
        if job.channel == "tasks":
            seen.append((job.task_id, job.id))
            with pytest.raises(AttributeError, match=r"a task has no query_id: .*job\.id"):
                job.query_id  # noqa: B018
        else:
            seen.append((job.query_id, job.id))
            with pytest.raises(AttributeError, match=r"a query has no task_id: .*job\.id"):
                job.task_id  # noqa: B018

    gateway = one_task("t1")
    assert await async_worker(gateway, wait_seconds=0).run_once(handler) == 1
    async with AsyncClient(BASE, "lg_client", transport=gateway.transport()) as client:
        await client.submit_query("shop", "balance", {}, query_id="q1")
    assert await async_worker(gateway, channel="queries", wait_seconds=0).run_once(handler) == 1
    assert seen == [("t1", "t1"), ("q1", "q1")]


async def test_a_string_error_code_is_refused_in_the_handler_not_lost_at_the_gateway(
        autojump_clock: Any) -> None:
    """The API's ``error.code`` is an integer (a string is a 400, and the result would wait
    for the lease to lapse): the SDK refuses one where the handler makes it, so the job
    is reported failed at once with that reason."""
    with pytest.raises(TypeError, match="code must be an integer"):
        Failed("site down", code="site_down")  # type: ignore[arg-type]

    async def handler(job: AsyncJob) -> Failed:
        return Failed("site down", code="site_down")  # type: ignore[arg-type]

    gateway = FakeGateway(Clock().now)
    async with AsyncClient(BASE, "lg_client", transport=gateway.transport()) as client:
        await client.submit_query("shop", "balance", {}, query_id="q1")
        assert await async_worker(gateway, channel="queries").run_once(handler) == 1
        query = await client.get_query("q1")
    assert query["status"] == "failed" and query["error"] is not None
    assert query["error"]["type"] == "TypeError"
    assert "code must be an integer" in query["error"]["message"]


async def test_a_call_with_no_retry_left_still_sends_the_next_call_to_the_next_gateway(
        autojump_clock: Any) -> None:
    """A failed gateway is left behind even when the call that found it is not tried
    again (``attempts=1``, as renewals are): the caller's next call goes elsewhere."""
    hosts: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "a.test":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"query_id": "q1"})

    async with AsyncClient(["http://a.test", "http://b.test"], "lg_client",
                           transport=httpx.MockTransport(answer),
                           retry=Retry(attempts=1)) as client:
        with pytest.raises(TransportError):
            await client.get_query("q1")
        assert (await client.get_query("q1"))["query_id"] == "q1"
    assert hosts == ["a.test", "b.test"]
