"""An operator's actions over HTTP (admin key): cancel with a reason, retry one job,
redrive (bulk retry with a dry run), pause, resume and throttle a site; each change
recorded in the job's history with who did it and why, and every refusal a clear 4xx
that changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests.conftest import Gateway

Json = dict[str, Any]
ORDER: Json = {"site": "shop", "account": "a1", "kind": "place_order", "params": {"n": 1}}
QUERY: Json = {"site": "shop", "kind": "balance", "params": {}, "max_attempts": 1}


async def call(gw: Gateway, method: str, path: str, who: str | None = "admin",
               body: Json | None = None) -> tuple[int, Json]:
    status, reply = await gw.call(method, path, who, json=body)
    assert isinstance(reply, dict), reply
    return status, reply


async def submit(gw: Gateway, task_id: str, **fields: Any) -> None:
    status, reply = await call(gw, "POST", "/v1/tasks", "t1",
                               {**ORDER, "task_id": task_id, **fields})
    assert status == 201, reply


async def lease(gw: Gateway, channel: str = "tasks", worker: str = "w1",
                **fields: Any) -> list[Json]:
    status, reply = await call(gw, "POST", f"/v1/{channel}/lease", "worker",
                               {"worker_id": worker, "wait_seconds": 0, **fields})
    assert status == 200, reply
    items: list[Json] = reply["items"]
    return items


async def fail_task(gw: Gateway, task_id: str, **fields: Any) -> None:
    """Submit, lease, start and fail one task (its own lane)."""
    await submit(gw, task_id, account=task_id, **fields)
    (item,) = [i for i in await lease(gw, max=10) if i["task_id"] == task_id]
    fenced = {"worker_id": "w1", "lease_token": item["lease_token"]}
    status, reply = await call(gw, "POST", f"/v1/tasks/{task_id}/start", "worker", fenced)
    assert status == 200, reply
    status, reply = await call(gw, "POST", f"/v1/tasks/{task_id}/result", "worker",
                               {**fenced, "outcome": "failed", "error": {"message": "no"},
                                "cost": 3})
    assert status == 200 and reply["status"] == "failed", reply


async def history(gw: Gateway, channel: str, job_id: str) -> list[Json]:
    status, reply = await call(gw, "GET", f"/v1/{channel}/{job_id}/events")
    assert status == 200, reply
    items: list[Json] = reply["items"]
    return items


# ---- cancel, resume ---------------------------------------------------------------------

async def test_an_admins_cancel_records_who_and_why(gateway: Gateway) -> None:
    await submit(gateway, "c1")
    status, reply = await call(gateway, "POST", "/v1/tasks/c1/cancel",
                               body={"reason": "customer called"})
    assert status == 200 and reply["status"] == "canceled", reply
    last = (await history(gateway, "tasks", "c1"))[-1]
    assert last["kind"] == "canceled" and last["detail"]["reason"] == "customer called"
    assert last["detail"]["by"].startswith("admin (")
    # A client's cancel still needs no body; a bad reason is a 400 that changes nothing.
    await submit(gateway, "c2")
    status, reply = await call(gateway, "POST", "/v1/tasks/c2/cancel", body={"reason": ""})
    assert status == 400 and reply["error"]["code"] == 4000, reply
    for text in (b"[]", b'"why"', b"{", b"7"):  # a body, if any, is the object documented
        status, reply = await gateway.call("POST", "/v1/tasks/c2/cancel", "admin", data=text,
                                           headers={"Content-Type": "application/json"})
        assert status == 400 and reply["error"]["code"] == 4000, (text, reply)
    status, reply = await call(gateway, "POST", "/v1/tasks/c2/cancel", "t1")
    assert status == 200 and reply["status"] == "canceled", reply
    assert "by" not in (await history(gateway, "tasks", "c2"))[-1]["detail"]


async def test_a_paused_batch_task_is_resumed_by_an_operator(gateway: Gateway) -> None:
    await submit(gateway, "b1", batch_total=10)
    status, reply = await call(gateway, "POST", "/v1/tasks/b1/pause", "t1")
    assert status == 200 and reply["status"] == "paused"
    status, reply = await call(gateway, "POST", "/v1/tasks/b1/resume",
                               body={"reason": "user is back"})
    assert status == 200 and reply["status"] == "queued", reply
    last = (await history(gateway, "tasks", "b1"))[-1]
    assert (last["kind"], last["detail"]["reason"]) == ("resumed", "user is back")


# ---- retry ------------------------------------------------------------------------------

async def test_retry_puts_a_failed_task_back_as_a_new_attempt(gateway: Gateway) -> None:
    await fail_task(gateway, "r1")
    status, reply = await call(gateway, "POST", "/v1/tasks/r1/retry",
                               body={"reason": "the site is fixed"})
    assert status == 200, reply
    assert (reply["status"], reply["result"], reply["error"], reply["completed_at"]) == (
        "queued", None, None, None)
    events = await history(gateway, "tasks", "r1")
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["submitted", "leased"] and kinds[-1] == "retried"  # history kept
    assert events[-1]["detail"]["was"] == "failed"
    assert events[-1]["detail"]["reason"] == "the site is fixed"
    assert events[-1]["detail"]["by"].startswith("admin (")
    (item,) = await lease(gateway)
    assert item["task_id"] == "r1" and item["attempt"] == 2
    # Not failed, expired or canceled now: 409, nothing changes.
    status, reply = await call(gateway, "POST", "/v1/tasks/r1/retry", body={"reason": "x"})
    assert status == 409 and reply["error"]["code"] == 6003, reply


async def test_retry_refusals(gateway: Gateway) -> None:
    await submit(gateway, "q1")
    for body, want in (({"reason": ""}, 400), ({}, 400), ({"reason": "x" * 501}, 400),
                       ({"reason": "ok", "extra": 1}, 400)):
        status, reply = await call(gateway, "POST", "/v1/tasks/q1/retry", body=body)
        assert status == want, (body, reply)
    status, reply = await call(gateway, "POST", "/v1/tasks/q1/retry", body={"reason": "x"})
    assert status == 409 and reply["error"]["code"] == 6003  # queued
    status, reply = await call(gateway, "POST", "/v1/tasks/nope/retry", body={"reason": "x"})
    assert status == 404 and reply["error"]["code"] == 6001
    status, reply = await call(gateway, "POST", "/v1/tasks/q1/retry", "t1", {"reason": "x"})
    assert status == 403
    status, reply = await call(gateway, "POST", "/v1/tasks/q1/retry", "worker", {"reason": "x"})
    assert status == 403


async def test_a_billed_retry_holds_again_and_402_when_short(gateway: Gateway) -> None:
    status, reply = await call(gateway, "POST", "/v1/ledger/accounts/t1/credit",
                               body={"amount": 15, "ref": "inv-1"})
    assert status == 200, reply
    await fail_task(gateway, "m1", max_cost=10)  # charged its cost 3, 7 back: 12 left
    status, reply = await call(gateway, "POST", "/v1/tasks/m1/retry", body={"reason": "again"})
    assert status == 200 and reply["billing"]["hold_status"] == "open", reply
    status, account = await call(gateway, "GET", "/v1/ledger/accounts/t1")
    assert (account["available"], account["held"]) == (2, 10), account
    # Canceled with nothing delivered: all of it back; a retry now is short (2 < 10).
    status, reply = await call(gateway, "POST", "/v1/tasks/m1/cancel", body={"reason": "stop"})
    assert reply["status"] == "canceled"
    await trio.sleep(0.1)
    status, account = await call(gateway, "GET", "/v1/ledger/accounts/t1")
    assert (account["available"], account["held"]) == (12, 0), account
    # Hold most of it elsewhere, then the retry is short: 402, the task stays canceled.
    await submit(gateway, "spend", account="s", max_cost=5)
    status, reply = await call(gateway, "POST", "/v1/tasks/m1/retry", body={"reason": "no"})
    assert status == 402 and reply["error"]["code"] == 6007, reply
    status, reply = await call(gateway, "GET", "/v1/tasks/m1")
    assert reply["status"] == "canceled"
    status, audit = await call(gateway, "GET", "/v1/ledger/audit")
    assert audit["ok"], audit


async def test_retry_of_queries(gateway: Gateway) -> None:
    status, reply = await call(gateway, "POST", "/v1/queries", "t1",
                               {**QUERY, "query_id": "qq1"})
    assert status == 201
    (item,) = await lease(gateway, "queries")
    status, reply = await call(gateway, "POST", "/v1/queries/qq1/result", "worker",
                               {"worker_id": "w1", "lease_token": item["lease_token"],
                                "outcome": "failed", "error": {"message": "down"}})
    assert reply["status"] == "failed"
    status, reply = await call(gateway, "POST", "/v1/queries/qq1/retry",
                               body={"reason": "up again"})
    assert status == 200 and (reply["status"], reply["attempts"]) == ("queued", 0), reply
    assert (await history(gateway, "queries", "qq1"))[-1]["kind"] == "retried"
    status, reply = await call(gateway, "POST", "/v1/queries/qq1/retry", body={"reason": "x"})
    assert status == 409 and reply["error"]["code"] == 6003



async def test_a_retried_query_that_fails_again_shows_only_its_new_error(
        gateway: Gateway) -> None:
    """The first failure's type and traceback go with the retry: a second failure that
    gives none does not show the first one's."""
    status, _ = await call(gateway, "POST", "/v1/queries", "t1", {**QUERY, "query_id": "qq2"})
    assert status == 201
    for error in ({"message": "down", "type": "shop.Down", "traceback": "Traceback ..."},
                  {"message": "still down"}):
        (item,) = await lease(gateway, "queries")
        status, reply = await call(gateway, "POST", "/v1/queries/qq2/result", "worker",
                                   {"worker_id": "w1", "lease_token": item["lease_token"],
                                    "outcome": "failed", "error": error})
        assert status == 200, reply
        assert reply["error"] == {"code": None, "type": None, "traceback": None, **error}
        status, reply = await call(gateway, "POST", "/v1/queries/qq2/retry",
                                   body={"reason": "again"})
        assert status == 200 and reply["error"] is None, reply


# ---- redrive ------------------------------------------------------------------------------

async def test_redrive_previews_then_retries_the_matching_failed_tasks(
        gateway: Gateway) -> None:
    for n in range(3):
        await fail_task(gateway, f"f{n}")
    await fail_task(gateway, "other", kind="refund")
    body = {"reason": "bulk", "status": "failed", "kind": "place_order", "dry_run": True}
    status, reply = await call(gateway, "POST", "/v1/tasks/redrive", body=body)
    assert (status, reply) == (200, {"matched": 3, "requeued": 0})
    status, reply = await call(gateway, "GET", "/v1/tasks?status=failed")
    assert reply["total"] == 4  # the dry run changed nothing
    status, reply = await call(gateway, "POST", "/v1/tasks/redrive",
                               body={**body, "dry_run": False, "limit": 2})
    assert (status, reply) == (200, {"matched": 3, "requeued": 2})
    status, reply = await call(gateway, "GET", "/v1/tasks?status=queued")
    assert sorted(t["task_id"] for t in reply["items"]) == ["f0", "f1"]  # the oldest
    assert (await history(gateway, "tasks", "f0"))[-1]["detail"]["reason"] == "bulk"
    for bad in ({"reason": "x", "status": "queued"}, {"reason": "x", "status": "failed",
                                                      "limit": 0},
                {"reason": "x", "status": "failed", "since": "yesterday"},
                {"status": "failed"}, {"reason": "x", "status": "failed", "site": "a b"}):
        status, reply = await call(gateway, "POST", "/v1/tasks/redrive", body=bad)
        assert status == 400, (bad, reply)
    status, reply = await call(gateway, "POST", "/v1/queries/redrive",
                               body={"reason": "x", "status": "canceled"})
    assert status == 400, reply  # a query is never canceled
    status, reply = await call(gateway, "POST", "/v1/queries/redrive",
                               body={"reason": "x", "status": "expired",
                                     "since": "2020-01-01T00:00:00Z"})
    assert (status, reply) == (200, {"matched": 0, "requeued": 0})
    # A date-time before 1970 is one (the document allows it): no job ended before it,
    # or, as until, every job ended after it (it was a 400, "since must be 0-1e+12").
    for since, until, matched in (("0265-08-13T12:46:47.5Z", None, 2),
                                  (None, "1969-12-31T23:59:59Z", 0)):
        status, reply = await call(gateway, "POST", "/v1/tasks/redrive", body={
            "reason": "x", "status": "failed", "dry_run": True, "since": since,
            "until": until})
        assert (status, reply) == (200, {"matched": matched, "requeued": 0}), reply


# ---- sites --------------------------------------------------------------------------------

async def test_a_paused_site_is_leased_on_neither_channel(gateway: Gateway) -> None:
    await submit(gateway, "p1")
    await call(gateway, "POST", "/v1/queries", "t1", {**QUERY, "query_id": "pq1"})
    status, site = await call(gateway, "POST", "/v1/sites/shop/pause",
                              body={"reason": "maintenance"})
    assert status == 200, site
    assert (site["paused"], site["queued_tasks"], site["queued_queries"]) == (True, 1, 1)
    assert site["reason"] == "maintenance" and site["changed_by"].startswith("admin (")
    assert await lease(gateway) == [] and await lease(gateway, "queries") == []
    assert await lease(gateway, sites=["shop"]) == []
    await submit(gateway, "p2", account="a2")  # submits still queue
    status, health = await call(gateway, "GET", "/health")
    assert health["checks"]["paused_sites"] == 1 and health["details"]["paused_sites"] == [
        "shop"]
    status, page = await call(gateway, "GET", "/v1/sites")
    assert page["total"] == 1 and page["items"][0]["queued_tasks"] == 2
    status, site = await call(gateway, "POST", "/v1/sites/shop/resume", body={"reason": "ok"})
    assert site["paused"] is False
    assert len(await lease(gateway, max=10)) == 2 and len(await lease(gateway, "queries")) == 1


async def test_a_parked_lease_gets_the_work_of_a_resumed_site(gateway: Gateway) -> None:
    await call(gateway, "POST", "/v1/sites/shop/pause", body={"reason": "wait"})
    await submit(gateway, "w1")
    got: list[list[Json]] = []

    async def worker() -> None:
        got.append(await lease(gateway, wait_seconds=20))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        await trio.sleep(1)
        assert got == []
        await call(gateway, "POST", "/v1/sites/shop/resume", body={"reason": "go"})
    assert [i["task_id"] for i in got[0]] == ["w1"]


async def test_a_throttled_site_is_leased_at_its_rate(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    for n in range(6):
        await submit(gateway, f"t{n}", account=f"a{n}")
    status, site = await call(gateway, "PUT", "/v1/sites/shop/throttle",
                              body={"leases_per_second": 2})
    assert status == 200 and site["leases_per_second"] == 2.0, site
    assert len(await lease(gateway, max=10)) == 1  # one at once, then the rate
    assert await lease(gateway, max=10) == []
    await trio.sleep(0.5)
    assert len(await lease(gateway, "tasks", "w2", max=10)) == 1
    # A parked lease is served as soon as a token comes back.
    start = trio.current_time()
    assert len(await lease(gateway, max=10, wait_seconds=5)) == 1
    assert 0.4 <= trio.current_time() - start <= 0.6
    for bad in ({"leases_per_second": 0}, {"leases_per_second": -1},
                {"leases_per_second": "2"}, {}, {"leases_per_second": True}):
        status, reply = await call(gateway, "PUT", "/v1/sites/shop/throttle", body=bad)
        assert status == 400, (bad, reply)
    status, site = await call(gateway, "PUT", "/v1/sites/shop/throttle",
                              body={"leases_per_second": None})
    assert site["leases_per_second"] is None
    assert len(await lease(gateway, max=10)) == 3
    status, page = await call(gateway, "GET", "/v1/sites")
    assert page["items"] == [] or page["items"][0]["leases_per_second"] is None


async def test_a_throttle_is_one_budget_for_tasks_and_queries(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    for n in range(6):
        await submit(gateway, f"t{n}", account=f"a{n}")
        await call(gateway, "POST", "/v1/queries", "t1", {**QUERY, "query_id": f"q{n}"})
    await call(gateway, "PUT", "/v1/sites/shop/throttle", body={"leases_per_second": 2})

    async def parked(channel: str) -> float:
        """How long a parked lease of ``channel`` waits for its one lease."""
        start = trio.current_time()
        assert len(await lease(gateway, channel, max=10, wait_seconds=5)) == 1
        return trio.current_time() - start

    assert len(await lease(gateway, "tasks", max=10)) == 1  # the first token
    assert await lease(gateway, "queries", max=10) == []  # gone for queries too
    # Tokens the task channel leaves unused go to a parked query as they come...
    assert await parked("queries") == pytest.approx(0.5, abs=1e-6)
    assert await lease(gateway, "tasks", max=10) == []
    assert await parked("tasks") == pytest.approx(0.5, abs=1e-6)
    # ...and the channel that drew last waits a hundredth of a second past the next
    # token's due time (courtesy), in which the other channel would take it first.
    assert await parked("tasks") == pytest.approx(0.51, abs=1e-6)
    # A pause keeps the bucket (empty now); a new rate starts a new one: one token.
    await call(gateway, "POST", "/v1/sites/shop/pause", body={"reason": "a moment"})
    await call(gateway, "POST", "/v1/sites/shop/resume", body={"reason": "back"})
    assert await lease(gateway, "queries", max=10) == []
    await call(gateway, "PUT", "/v1/sites/shop/throttle", body={"leases_per_second": 1})
    assert len(await lease(gateway, "queries", max=10)) == 1
    assert await lease(gateway, "tasks", max=10) == []


async def test_site_routes_are_the_admins(gateway: Gateway) -> None:
    for who in ("t1", "worker"):
        status, _ = await call(gateway, "POST", "/v1/sites/shop/pause", who, {"reason": "x"})
        assert status == 403
        status, _ = await call(gateway, "GET", "/v1/sites", who)
        assert status == 403
    status, reply = await call(gateway, "POST", "/v1/sites/a%20b/pause", body={"reason": "x"})
    assert status == 400, reply
    status, reply = await call(gateway, "POST", "/v1/sites/shop/pause", body={})
    assert status == 400, reply


async def test_a_start_with_another_tasks_token_says_so(gateway: Gateway) -> None:
    await submit(gateway, "ta", account="x1")
    await submit(gateway, "tb", account="x2")
    (item_a,) = await lease(gateway, sites=["shop"], max=1)
    other = "tb" if item_a["task_id"] == "ta" else "ta"
    status, reply = await call(gateway, "POST", f"/v1/tasks/{other}/start", "worker",
                               {"worker_id": "w1", "lease_token": item_a["lease_token"]})
    assert status == 409 and reply["error"]["code"] == 6002, reply
    message = reply["error"]["message"]
    assert "not this task's lease" in message and "queued again" not in message, message
