"""``/health``: small and the same for everyone without an admin key; details for admins."""

from __future__ import annotations

import json

import httpx
import trio

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
    assert len(detailed["details"]["sites_without_worker"]) == 500
    assert detailed["details"]["queued"]["tasks"]["site-0042"] == 1
    assert set(detailed["details"]["jobs"]) >= {"tasks.purge_tasks", "artifacts.sweep_staging"}


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
