"""Query retries over HTTP: a failed query waits its backoff (exact virtual times),
``retryable: false`` fails it at once, a snooze spends no attempt, each attempt's error
is kept; a task's errors survive its operator retries."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio

from leasegate.actors.queries import results as query_results
from leasegate.settings import load
from tests.conftest import Gateway

pytestmark = pytest.mark.both_engines


class Fixed:
    """A jitter source that always draws ``factor``."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def uniform(self, low: float, high: float) -> float:
        assert (low, high) == (0.8, 1.2)
        return self.factor


@pytest.fixture(autouse=True)
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query_results, "JITTER", Fixed(1.0))


async def submit(gw: Gateway, query_id: str, **body: object) -> dict[str, Any]:
    status, reply = await gw.call("POST", "/v1/queries", "t1", json={
        "query_id": query_id, "site": "shop", "kind": "balance", "params": {}, **body})
    assert status == 201, reply
    result: dict[str, Any] = reply
    return result


async def lease(gw: Gateway, wait: float = 0) -> list[dict[str, Any]]:
    status, reply = await gw.call("POST", "/v1/queries/lease", "worker",
                                  json={"worker_id": "w1", "wait_seconds": wait})
    assert status == 200, reply
    items: list[dict[str, Any]] = reply["items"]
    return items


async def report(gw: Gateway, item: dict[str, Any], **body: object) -> tuple[int, Any]:
    return await gw.call("POST", f"/v1/queries/{item['query_id']}/result", "worker",
                         json={"worker_id": "w1", "lease_token": item["lease_token"], **body})


async def get(gw: Gateway, query_id: str) -> dict[str, Any]:
    status, reply = await gw.call("GET", f"/v1/queries/{query_id}", "t1")
    assert status == 200, reply
    result: dict[str, Any] = reply
    return result


DOWN = {"code": 503, "message": "site down", "type": "shop.Down", "traceback": "Traceback…"}


async def test_a_failed_query_waits_its_backoff_then_fails_after_max_attempts(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    await submit(gateway, "q1", max_attempts=3)
    (item,) = await lease(gateway)
    status, reply = await report(gateway, item, outcome="failed", error=DOWN)
    # attempt 1 failed: 2 s (query_retry_base_seconds × 2^0), no terminal state yet
    assert status == 200, reply
    assert (reply["status"], reply["next_attempt_at"], reply["error"], reply["lease_owner"],
            reply["completed_at"], reply["max_attempts"]) == (
        "queued", "2026-11-30T08:00:02Z", None, None, None, 3)
    assert reply["errors"] == [{"attempt": 1, "at": "2026-11-30T08:00:00Z",
                                "worker_id": "w1", **DOWN}]
    assert await lease(gateway) == []  # waiting: not leasable before its time

    # a parked long-poll is woken exactly when the wait ends
    (item,) = await lease(gateway, wait=30)
    assert (trio.current_time() - start, item["attempt"]) == (2, 2)
    status, reply = await report(gateway, item, outcome="failed", error={"message": "again"})
    assert reply["next_attempt_at"] == "2026-11-30T08:00:06Z"  # 2 s × 2^1 after t = 2

    await trio.sleep(3.9)
    assert await lease(gateway) == []
    await trio.sleep(0.1)
    (item,) = await lease(gateway)
    assert item["attempt"] == 3
    status, reply = await report(gateway, item, outcome="failed", error={"message": "last"})
    assert (status, reply["status"], reply["next_attempt_at"], reply["attempts"]) == (
        200, "failed", None, 3)
    assert reply["error"] == {"code": None, "message": "last", "type": None, "traceback": None}
    assert [(e["attempt"], e["at"], e["message"]) for e in reply["errors"]] == [
        (1, "2026-11-30T08:00:00Z", "site down"), (2, "2026-11-30T08:00:02Z", "again"),
        (3, "2026-11-30T08:00:06Z", "last")]
    assert reply == await get(gateway, "q1")


async def test_the_backoff_doubles_up_to_its_cap_with_its_jitter(
        gateway: Gateway, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load(environ={}, overrides={"query_retry_base_seconds": 10,
                                           "query_retry_max_seconds": 30})
    assert [query_results.backoff(settings, n) for n in (1, 2, 3, 4, 100)] == [10, 20, 30, 30, 30]
    for factor in (0.8, 1.2):  # the edges of the ±20% window
        monkeypatch.setattr(query_results, "JITTER", Fixed(factor))
        assert query_results.backoff(settings, 2) == pytest.approx(20 * factor)
    # the real source draws inside the window
    monkeypatch.setattr(query_results, "JITTER", random.Random(7))
    waits = [query_results.backoff(settings, 1) for _ in range(200)]
    assert all(8 <= w <= 12 for w in waits) and max(waits) - min(waits) > 2


async def test_a_query_waiting_past_its_ttl_expires_then(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    """The TTL comes first: a retry due after it never runs."""
    await submit(gateway, "q1")
    await trio.sleep(590)
    (item,) = await lease(gateway)
    status, reply = await report(gateway, item, outcome="snoozed", snooze_seconds=3600)
    assert (status, reply["next_attempt_at"]) == (200, "2026-11-30T09:09:50Z")
    await trio.sleep(10)  # query_ttl: 600 s from its submit
    reply = await get(gateway, "q1")
    assert (reply["status"], reply["next_attempt_at"], reply["completed_at"]) == (
        "expired", None, "2026-11-30T08:10:00Z")


async def test_an_operator_retry_keeps_the_errors_and_is_leasable_at_once(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, "q1", max_attempts=1)
    (item,) = await lease(gateway)
    await report(gateway, item, outcome="failed", error={"message": "down"})
    status, reply = await gateway.call("POST", "/v1/queries/q1/retry", "admin",
                                       json={"reason": "the site is back"})
    assert (status, reply["status"], reply["attempts"], reply["next_attempt_at"]) == (
        200, "queued", 0, None)
    assert [e["message"] for e in reply["errors"]] == ["down"]
    (item,) = await lease(gateway)
    assert item["attempt"] == 1


async def test_a_permanent_error_fails_the_query_at_once(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, "q1", max_attempts=5)
    (item,) = await lease(gateway)
    status, reply = await report(gateway, item, outcome="failed",
                                 error={"message": "no such account", "retryable": False})
    assert (status, reply["status"], reply["attempts"], len(reply["errors"])) == (
        200, "failed", 1, 1)


async def test_a_snooze_queues_the_query_again_and_spends_no_attempt(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    await submit(gateway, "q1", max_attempts=1)
    for wake in ("08:00:20", "08:00:40", "08:01:00"):  # snoozed 3 times: 1 attempt left
        (item,) = await lease(gateway, wait=30)
        assert item["attempt"] == 1
        status, reply = await report(gateway, item, outcome="snoozed", snooze_seconds=20)
        assert (status, reply["status"], reply["attempts"], reply["errors"]) == (
            200, "queued", 0, [])
        assert reply["next_attempt_at"] == f"2026-11-30T{wake}Z"
        # a repeated report of the same lease gets the state back
        assert await report(gateway, item, outcome="snoozed", snooze_seconds=20) == (
            200, reply)
    (item,) = await lease(gateway, wait=30)
    assert trio.current_time() - start == 60
    status, reply = await report(gateway, item, outcome="failed", error={"message": "x"})
    assert (reply["status"], reply["attempts"]) == ("failed", 1)


async def test_a_lapsed_lease_is_an_attempt_with_its_error(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, "q1", max_attempts=2)
    for _ in range(2):
        assert len(await lease(gateway, wait=30)) == 1
        await trio.sleep(60)  # query_lease_ttl: redelivered at once, then failed
    reply = await get(gateway, "q1")
    assert (reply["status"], reply["attempts"]) == ("failed", 2)
    assert [(e["attempt"], e["at"], e["type"], e["worker_id"]) for e in reply["errors"]] == [
        (1, "2026-11-30T08:01:00Z", "lease_expired", "w1"),
        (2, "2026-11-30T08:02:00Z", "lease_expired", "w1")]


async def test_results_in_a_batch_take_the_same_outcomes(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    for n in range(3):
        await submit(gateway, f"q{n}")
    status, reply = await gateway.call("POST", "/v1/queries/lease", "worker",
                                       json={"worker_id": "w1", "wait_seconds": 0, "max": 3})
    tokens = {item["query_id"]: item["lease_token"] for item in reply["items"]}
    status, reply = await gateway.call("POST", "/v1/queries/results", "worker", json={
        "worker_id": "w1", "items": [
            {"query_id": "q0", "lease_token": tokens["q0"], "outcome": "snoozed",
             "snooze_seconds": 90},
            {"query_id": "q1", "lease_token": tokens["q1"], "outcome": "failed",
             "error": {"message": "gone", "retryable": False}},
            {"query_id": "q2", "lease_token": tokens["q2"], "outcome": "failed",
             "error": {"message": "busy"}},
            {"query_id": "q2", "lease_token": tokens["q2"], "outcome": "snoozed"}]})
    assert status == 200
    assert [i["status"] for i in reply["items"]] == [200, 200, 200, 400]
    queries = [i.get("query") for i in reply["items"][:3]]
    assert [(q["status"], q["next_attempt_at"]) for q in queries] == [
        ("queued", "2026-11-30T08:01:30Z"), ("failed", None),
        ("queued", "2026-11-30T08:00:02Z")]


@pytest.mark.parametrize("body", [
    {"outcome": "snoozed"},
    {"outcome": "snoozed", "snooze_seconds": 0},
    {"outcome": "snoozed", "snooze_seconds": 86401},
    {"outcome": "snoozed", "snooze_seconds": 1.5},
    {"outcome": "failed", "snooze_seconds": 5},
    {"outcome": "failed", "error": {"message": "x", "retryable": "no"}},
])
async def test_bad_reports_are_400_and_change_nothing(gateway: Gateway,
                                                      body: dict[str, Any]) -> None:
    await submit(gateway, "q1")
    (item,) = await lease(gateway)
    status, reply = await report(gateway, item, **body)
    assert (status, reply["error"]["code"]) == (400, 4000), reply
    assert (await get(gateway, "q1"))["status"] == "leased"


@pytest.mark.parametrize("max_attempts", [0, 101, "3", 2.5])
async def test_max_attempts_is_1_to_100(gateway: Gateway, max_attempts: object) -> None:
    status, reply = await gateway.call("POST", "/v1/queries", "t1", json={
        "site": "shop", "kind": "balance", "params": {}, "max_attempts": max_attempts})
    assert (status, reply["error"]["code"]) == (400, 4000)


async def test_max_attempts_defaults_to_the_setting(gateway: Gateway) -> None:
    await submit(gateway, "q1")
    assert (await get(gateway, "q1"))["max_attempts"] == 3  # query_max_attempts


async def test_a_tasks_errors_survive_operator_retries(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    status, _ = await gateway.call("POST", "/v1/tasks", "t1", json={
        "task_id": "t1", "site": "shop", "kind": "order", "params": {}})
    assert status == 201
    for n in (1, 2):
        status, reply = await gateway.call("POST", "/v1/tasks/lease", "worker",
                                           json={"worker_id": "w1", "wait_seconds": 0})
        (item,) = reply["items"]
        fence = {"worker_id": "w1", "lease_token": item["lease_token"]}
        await gateway.call("POST", "/v1/tasks/t1/start", "worker", json=fence)
        await trio.sleep(10)
        status, task = await gateway.call("POST", "/v1/tasks/t1/result", "worker", json={
            **fence, "outcome": "failed", "error": {"code": n, "message": f"fail {n}"}})
        assert task["status"] == "failed"  # a task never retries by itself
        assert [e["message"] for e in task["errors"]] == [f"fail {m}" for m in range(1, n + 1)]
        status, task = await gateway.call("POST", "/v1/tasks/t1/retry", "admin",
                                          json={"reason": "try again"})
        assert (status, task["status"], task["error"]) == (200, "queued", None)
        assert [(e["attempt"], e["code"], e["worker_id"]) for e in task["errors"]] == [
            (m, m, "w1") for m in range(1, n + 1)]
    assert task["errors"][1]["at"] == "2026-11-30T08:00:20Z"


async def test_a_submit_to_a_paused_site_says_so(gateway: Gateway) -> None:
    status, _ = await gateway.call("POST", "/v1/sites/shop/pause", "admin",
                                   json={"reason": "maintenance"})
    assert status == 200
    status, reply = await gateway.call("POST", "/v1/queries", "t1", json={
        "query_id": "q1", "site": "shop", "kind": "balance", "params": {}})
    assert (status, reply) == (201, {"query_id": "q1", "status": "queued", "created": True,
                                     "site_paused": True})
    status, reply = await gateway.call("POST", "/v1/tasks", "t1", json={
        "task_id": "t1", "site": "shop", "kind": "order", "params": {}})
    assert (status, reply.get("site_paused")) == (201, True)
    status, reply = await gateway.call("POST", "/v1/tasks/batch", "t1", json={"items": [
        {"task_id": "t1", "site": "shop", "kind": "order", "params": {}},
        {"task_id": "t2", "site": "other", "kind": "order", "params": {}}]})
    assert [i["task"] for i in reply["items"]] == [
        {"task_id": "t1", "status": "queued", "created": False, "site_paused": True},
        {"task_id": "t2", "status": "queued", "created": True}]  # not paused: left out
    await gateway.call("POST", "/v1/sites/shop/resume", "admin", json={"reason": "done"})
    status, reply = await gateway.call("POST", "/v1/queries", "t1", json={
        "query_id": "q2", "site": "shop", "kind": "balance", "params": {}})
    assert (status, reply) == (201, {"query_id": "q2", "status": "queued", "created": True})
