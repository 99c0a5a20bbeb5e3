"""``/health``: small and the same for everyone without an admin key; details for admins."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from leasegate.actors.tasks.submit import SubmitTask
from tests.conftest import Gateway
from tests.served import Served


async def test_the_public_view_stays_small_however_many_sites(gateway: Gateway) -> None:
    async def submit(site: int) -> None:
        await gateway.system.tasks.ask(SubmitTask("t1", f"site-{site:04d}", "export"))

    async with trio.open_nursery() as nursery:
        for site in range(500):
            nursery.start_soon(submit, site)
    response = await gateway.client.get("/health")
    public = await response.get_json()
    assert response.status_code == 200 and len(await response.get_data()) < 1024
    assert public["status"] == "degraded" and "details" not in public
    assert public["checks"]["sites_without_worker"] == 500
    assert public["checks"]["queued"] == {"tasks": 500, "queries": 0}
    for who in ("t1", "worker"):  # any key but an admin's: the public view
        status, body = await gateway.call("GET", "/health", who)
        assert (status, body) == (200, public)
    status, detailed = await gateway.call("GET", "/health", "admin")
    assert status == 200 and detailed["checks"] == public["checks"]
    assert detailed["details"]["sites_without_worker"][:2] == ["site-0000", "site-0001"]
    assert detailed["details"]["queued"]["tasks"]["site-0019"] == 1
    assert set(detailed["details"]["jobs"]) >= {"tasks.purge_tasks", "artifacts.sweep_staging"}


async def invent_sites(gateway: Gateway, first: int, count: int) -> None:
    """One queued task and one queued query on each of ``count`` new sites."""
    for start in range(first, first + count, 100):
        numbers = range(start, min(start + 100, first + count))
        for path, noun in (("/v1/tasks/batch", "task"), ("/v1/queries/batch", "query")):
            status, reply = await gateway.call("POST", path, "t1", json={"items": [
                {f"{noun}_id": f"{noun}-{n}", "site": f"site-{n:05d}", "kind": "k"}
                for n in numbers]})
            assert status == 200 and {item["status"] for item in reply["items"]} == {201}


async def block_lanes(gateway: Gateway, count: int) -> None:
    """``count`` tasks leased, started and left to go stale (their lanes blocked)."""
    status, leased = await gateway.call("POST", "/v1/tasks/lease", "worker", json={
        "worker_id": "w1", "wait_seconds": 0, "max": count})
    assert status == 200 and len(leased["items"]) == count
    status, started = await gateway.call("POST", "/v1/tasks/start", "worker", json={
        "worker_id": "w1", "items": [{"task_id": item["task_id"],
                                      "lease_token": item["lease_token"]}
                                     for item in leased["items"]]})
    assert status == 200 and {item["status"] for item in started["items"]} == {200}
    await trio.sleep(121)  # past task_lease_ttl: stale; and the worker is offline again


async def test_admin_views_stay_the_same_size_however_many_sites(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    signed_in = await gateway.client.post("/console/sign-in",
                                          form={"key": gateway.keys["admin"]})
    assert signed_in.status_code == 303

    async def sizes() -> tuple[int, int, dict[str, Any], str]:
        health = await gateway.client.get("/health", headers=gateway.auth("admin"))
        console = await gateway.client.get("/console/")
        assert health.status_code == console.status_code == 200
        html = await console.get_data(as_text=True)
        return len(await health.get_data()), len(html), await health.get_json(), html

    await invent_sites(gateway, 0, 100)
    await block_lanes(gateway, 25)
    health_before, console_before, _, _ = await sizes()
    await invent_sites(gateway, 100, 1400)
    await block_lanes(gateway, 25)
    health_after, console_after, report, html = await sizes()
    # Only figures change (a count of 2 digits becomes 4): no list grows.
    assert health_after - health_before < 100 and health_after < 8 * 1024
    assert console_after - console_before < 200 and console_after < 40 * 1024
    # ... and they still say how many there are, and where to find the rest.
    checks, details = report["checks"], report["details"]
    assert checks["sites_without_worker"] == 1450 and checks["blocked_lanes"] == 50
    assert checks["queued"] == {"tasks": 1450, "queries": 1500}
    assert len(details["blocked_lanes"]) == len(details["sites_without_worker"]) == 20
    assert len(details["queued"]["tasks"]) == len(details["queued"]["queries"]) == 20
    assert details["unlisted"] == {"blocked_lanes": 30, "sites_without_worker": 1430,
                                   "queued_tasks": 1430, "queued_queries": 1480,
                                   "leased_queries": 0}
    assert details["see_all"]["sites_without_worker"] == "/v1/sites/tasks?unserved=true"
    assert "1450 queued tasks on 1450 sites, 1450 without a worker" in " ".join(html.split())
    assert "and 30 more" in html


async def test_every_site_can_be_paged_through(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await invent_sites(gateway, 0, 120)
    status, _ = await gateway.call("POST", "/v1/tasks", "t1", json={
        "site": "site-00007", "account": "second", "kind": "k"})
    assert status == 201
    seen: list[dict[str, Any]] = []
    for offset in (0, 50, 100):
        status, page = await gateway.call("GET", f"/v1/sites/tasks?offset={offset}", "admin")
        assert status == 200 and page["total"] == 120
        seen += page["items"]
    assert seen[0] == {"site": "site-00007", "queued": 2, "served": False}  # the most first
    assert {item["site"] for item in seen} == {f"site-{n:05d}" for n in range(120)}
    # A worker serving one site takes it off the unserved list.
    await gateway.call("POST", "/v1/tasks/lease", "worker", json={
        "worker_id": "w1", "wait_seconds": 0, "sites": ["site-00119"], "max": 1})
    status, page = await gateway.call("GET", "/v1/sites/tasks?unserved=true&limit=500",
                                      "admin")
    assert page["total"] == 119 and "site-00119" not in {i["site"] for i in page["items"]}
    status, page = await gateway.call("GET", "/v1/sites/queries?limit=2&offset=1", "admin")
    assert status == 200 and page["total"] == 120
    assert page["items"] == [{"site": "site-00001", "queued": 1, "leased": 0},
                             {"site": "site-00002", "queued": 1, "leased": 0}]
    for who in ("t1", "worker"):
        assert (await gateway.call("GET", "/v1/sites/tasks", who))[0] == 403
    console = await gateway.client.post("/console/sign-in", form={"key": gateway.keys["admin"]})
    assert console.status_code == 303
    response = await gateway.client.get("/console/sites?unserved=1&offset=50")
    html = await response.get_data(as_text=True)
    assert response.status_code == 200 and "119 sites with queued tasks and no online" in html
    assert html.count("<tr><td><a href=") == 50


async def test_a_bad_key_gets_the_public_view_not_a_401(gateway: Gateway) -> None:
    _, public = await gateway.call("GET", "/health")
    for header in ("Bearer lg_nosuchkey_secret", "Bearer garbage", "Basic abc", "Bearer "):
        response = await gateway.client.get("/health", headers={"Authorization": header})
        assert response.status_code == 200
        assert await response.get_json() == public


def test_served_health_is_public_and_small(served: Served) -> None:
    public = httpx.get(f"{served.url}/health", timeout=10)
    bad = httpx.get(f"{served.url}/health", headers={"Authorization": "Bearer lg_x_y"},
                    timeout=10)
    assert public.status_code == bad.status_code == 200
    assert "details" not in public.json() and len(public.content) < 1024
    assert json.loads(bad.content)["checks"].keys() == public.json()["checks"].keys()
    with served.client("admin") as admin:
        assert "jobs" in admin.get("/health").json()["details"]


async def test_metrics_keep_a_series_per_busiest_site_and_sum_the_rest(
        gateway: Gateway) -> None:
    await invent_sites(gateway, 0, 150)
    response = await gateway.client.get("/metrics", headers=gateway.auth("admin"))
    [jobs] = [family for family in text_string_to_metric_families(
        await response.get_data(as_text=True)) if family.name == "leasegate_jobs"]
    queued = {s.labels["site"]: s.value for s in jobs.samples
              if s.labels["channel"] == "task" and s.labels["status"] == "queued"}
    queries = [s for s in jobs.samples
               if s.labels["channel"] == "query" and s.labels["status"] == "queued"]
    assert len(queued) == len(queries) == 101  # the 100 busiest sites, and the others
    assert queued["(other)"] == 50 and sum(queued.values()) == 150
