"""Backlog signals over HTTP, on both engines, at exact virtual times: per site and
channel, the jobs a lease could take now and the age of the oldest since it became
leasable, in ``GET /v1/sites`` and in ``/metrics`` (what an autoscaler reads)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from leasegate.actors.queries import results as query_results
from tests.conftest import Gateway
from tests.test_metrics import samples, scrape
from tests.test_query_retries import Fixed, lease, report

pytestmark = pytest.mark.both_engines


async def site(gw: Gateway, name: str) -> dict[str, Any]:
    status, reply = await gw.call("GET", "/v1/sites", "admin")
    assert status == 200, reply
    (found,) = [s for s in reply["items"] if s["site"] == name]
    result: dict[str, Any] = found
    return result


async def metric(gw: Gateway, name: str, site_name: str, channel: str) -> float:
    family = (await scrape(gw))[name]
    (sample,) = samples(family, name, site=site_name, channel=channel)
    return float(sample.value)


async def test_the_backlog_counts_what_a_lease_could_take_and_how_long_it_waited(
        gateway: Gateway, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query_results, "JITTER", Fixed(1.0))
    for task_id, account in (("t1", "a"), ("t2", "a"), ("t3", "b")):
        status, _ = await gateway.call("POST", "/v1/tasks", "t1", json={
            "task_id": task_id, "site": "shop", "account": account, "kind": "order",
            "params": {}})
        assert status == 201
    await trio.sleep(5)
    status, _ = await gateway.call("POST", "/v1/queries", "t1", json={
        "query_id": "q1", "site": "shop", "kind": "balance", "params": {}})
    await trio.sleep(5)
    # two lanes free (t2 waits behind t1 in lane a): two tasks leasable, the oldest 10 s
    shop = await site(gateway, "shop")
    assert (shop["queued_tasks"], shop["tasks"], shop["queries"]) == (
        3, {"leasable": 2, "oldest_leasable_age_seconds": 10.0},
        {"leasable": 1, "oldest_leasable_age_seconds": 5.0})
    assert await metric(gateway, "leasegate_leasable_jobs", "shop", "task") == 2
    assert await metric(gateway, "leasegate_oldest_leasable_age_seconds", "shop", "query") == 5

    # a query waiting for its retry is queued but not leasable, until its wait ends
    (item,) = await lease(gateway)
    await report(gateway, item, outcome="failed", error={"message": "down"})  # back at +2 s
    shop = await site(gateway, "shop")
    assert (shop["queued_queries"], shop["queries"]) == (
        1, {"leasable": 0, "oldest_leasable_age_seconds": None})
    assert await metric(gateway, "leasegate_oldest_leasable_age_seconds", "shop", "query") == 0
    await trio.sleep(5)  # leasable since 2 s after the failure
    assert (await site(gateway, "shop"))["queries"] == {
        "leasable": 1, "oldest_leasable_age_seconds": 3.0}

    # a paused site's work still counts (pause and throttle aside)
    await gateway.call("POST", "/v1/sites/shop/pause", "admin", json={"reason": "x"})
    shop = await site(gateway, "shop")
    assert (shop["paused"], shop["tasks"]["leasable"]) == (True, 2)
