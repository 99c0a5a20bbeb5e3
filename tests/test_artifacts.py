"""Task artifacts over HTTP: uploaded under the lease, read by the tenant, deleted
off the actor's path (purge, orphan sweep, staging sweep)."""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.clock import Clock
from leasegate.settings import Settings
from tests.conftest import Gateway, start_gateway

HOUR = 3600.0


async def leased_task(gw: Gateway, task_id: str = "t1", start: bool = True) -> str:
    status, _ = await gw.call("POST", "/v1/tasks", "t1", json={
        "task_id": task_id, "site": "shop", "kind": "export", "params": {}})
    assert status == 201
    _, leased = await gw.call("POST", "/v1/tasks/lease", "worker",
                              json={"worker_id": "w1", "wait_seconds": 0})
    token: str = leased["items"][0]["lease_token"]
    if start:
        status, _ = await gw.call("POST", f"/v1/tasks/{task_id}/start", "worker",
                                  json={"worker_id": "w1", "lease_token": token})
        assert status == 200
    return token


async def upload(gw: Gateway, task_id: str, name: str, data: bytes, token: str,
                 worker: str = "w1") -> tuple[int, Any]:
    response = await gw.client.put(
        f"/v1/tasks/{task_id}/artifacts/{name}", data=data,
        headers={**gw.auth("worker"), "X-Worker-Id": worker, "X-Lease-Token": token})
    return response.status_code, await response.get_json()


async def until(condition: Callable[[], bool], seconds: int = 120) -> None:
    """Let virtual time pass a second at a time until ``condition`` holds.

    Work in threads (file deletion) counts as blocked for the autojump clock,
    so ``wait_all_tasks_blocked`` cannot tell when it has finished; the tests
    set a small real ``autojump_threshold`` so that each second gives it time.
    """
    for _ in range(seconds):
        if condition():
            return
        await trio.sleep(1)
    raise AssertionError("condition not reached")


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_upload_list_and_download(gateway: Gateway) -> None:
    token = await leased_task(gateway)
    # Small: the quart-trio test client deadlocks on responses over ~80 KiB (it
    # buffers 10 chunks before reading); test_serve_e2e moves megabytes for real.
    data = os.urandom(60_000)
    status, stored = await upload(gateway, "t1", "report.csv", data, token)
    assert status == 201
    assert stored == {"name": "report.csv", "size": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()}
    status, listed = await gateway.call("GET", "/v1/tasks/t1/artifacts", "t1")
    assert status == 200
    # The test client may take a real second to send the body (no autojump clock here).
    [item] = listed["items"]
    assert item["created_at"] in ("2026-11-30T08:00:00Z", "2026-11-30T08:00:01Z")
    assert item == {**stored, "created_at": item["created_at"]}
    response = await gateway.client.get("/v1/tasks/t1/artifacts/report.csv",
                                        headers=gateway.auth("t1"))
    assert response.status_code == 200 and await response.get_data() == data
    assert response.headers["X-Artifact-Sha256"] == stored["sha256"]
    assert files_under(gateway.system.artifacts.root) == [f"t_t1/report.csv@{stored['sha256']}"]


async def test_uploads_over_the_body_limit_are_accepted(gateway: Gateway) -> None:
    token = await leased_task(gateway)
    data = os.urandom(2 * 1024 * 1024)  # over max_body_bytes: artifacts have their own limit
    status, stored = await upload(gateway, "t1", "big.bin", data, token)
    assert status == 201 and stored["size"] == len(data)
    assert gateway.system.artifacts.path("t1", "big.bin", stored["sha256"]).read_bytes() == data


async def test_a_claim_may_upload_too_and_reupload_replaces(gateway: Gateway) -> None:
    token = await leased_task(gateway, start=False)
    assert (await upload(gateway, "t1", "a.txt", b"one", token))[0] == 201
    status, stored = await upload(gateway, "t1", "a.txt", b"two!", token)
    assert status == 201 and stored["size"] == 4
    response = await gateway.client.get("/v1/tasks/t1/artifacts/a.txt", headers=gateway.auth("t1"))
    assert await response.get_data() == b"two!"
    await until(lambda: gateway.system.artifacts.deleted == 1)  # the first version, later
    assert files_under(gateway.system.artifacts.root) == [f"t_t1/a.txt@{stored['sha256']}"]


async def test_only_the_lease_holder_uploads(gateway: Gateway) -> None:
    token = await leased_task(gateway)
    for bad_token, worker in (("forged", "w1"), (token, "w2")):
        status, body = await upload(gateway, "t1", "x.bin", b"data", bad_token, worker)
        assert status == 409 and body["error"]["code"] == 6002
    status, body = await upload(gateway, "missing", "x.bin", b"data", token)
    assert status == 404 and body["error"]["code"] == 6001
    await gateway.call("POST", "/v1/tasks/t1/result", "worker", json={
        "worker_id": "w1", "lease_token": token, "outcome": "succeeded"})
    status, body = await upload(gateway, "t1", "late.bin", b"data", token)
    assert status == 409 and body["error"]["code"] == 6002
    assert files_under(gateway.system.artifacts.root) == []  # nothing staged is kept


@pytest.mark.parametrize("name", [".hidden", "a" * 129, "sp ace", "semi;colon"])
async def test_bad_names_are_400(gateway: Gateway, name: str) -> None:
    token = await leased_task(gateway)
    status, body = await upload(gateway, "t1", name, b"x", token)
    assert status == 400 and body["error"]["code"] == 4000


async def test_missing_lease_headers_are_400(gateway: Gateway) -> None:
    await leased_task(gateway)
    response = await gateway.client.put("/v1/tasks/t1/artifacts/a", data=b"x",
                                        headers=gateway.auth("worker"))
    assert response.status_code == 400


async def test_roles_and_tenants(gateway: Gateway) -> None:
    token = await leased_task(gateway)
    await upload(gateway, "t1", "a", b"x", token)
    status, body = await gateway.call("GET", "/v1/tasks/t1/artifacts", "t2")
    assert status == 404 and body["error"]["code"] == 6001
    status, body = await gateway.call("GET", "/v1/tasks/t1/artifacts/a", "t2")
    assert status == 404 and body["error"]["code"] == 6001
    status, body = await gateway.call("GET", "/v1/tasks/t1/artifacts/nope", "t1")
    assert status == 404 and body["error"]["code"] == 6009
    assert (await gateway.call("GET", "/v1/tasks/t1/artifacts", "admin"))[0] == 200
    response = await gateway.client.put("/v1/tasks/t1/artifacts/a", data=b"x", headers={
        **gateway.auth("t1"), "X-Worker-Id": "w1", "X-Lease-Token": token})
    assert response.status_code == 403


async def test_oversized_upload_is_413_and_leaves_nothing(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    gw = await start_gateway(nursery, tmp_path / "small.db",
                             settings.replace(max_artifact_bytes=1000), clock)
    token = await leased_task(gw)
    status, body = await upload(gw, "t1", "big", b"x" * 1001, token)
    assert status == 413 and body["error"]["code"] == 4130
    assert (await upload(gw, "t1", "fits", b"x" * 1000, token))[0] == 201
    assert [f.split("@")[0] for f in files_under(gw.system.artifacts.root)] == ["t_t1/fits"]


async def test_the_413_names_the_limit_of_its_route(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    gw = await start_gateway(nursery, tmp_path / "limits.db",
                             settings.replace(max_body_bytes=1000, max_artifact_bytes=2000), clock)
    token = await leased_task(gw)
    status, body = await upload(gw, "t1", "big", b"x" * 2001, token)
    assert status == 413 and body["error"]["message"] == (
        "the request body is over this route's limit of 2000 bytes (max_artifact_bytes)")
    status, body = await gw.call("POST", "/v1/tasks", "t1", json={
        "site": "shop", "kind": "k", "params": {"pad": "x" * 1000}})
    assert status == 413 and body["error"]["message"] == (
        "the request body is over this route's limit of 1000 bytes (max_body_bytes)")


async def test_a_task_keeps_at_most_max_artifacts_per_task(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    gw = await start_gateway(nursery, tmp_path / "count.db",
                             settings.replace(max_artifacts_per_task=3), clock)
    token = await leased_task(gw)
    for name in ("a", "b", "c"):
        assert (await upload(gw, "t1", name, b"data", token))[0] == 201
    status, body = await upload(gw, "t1", "d", b"data", token)
    assert status == 409 and body["error"]["code"] == 6003
    assert "max_artifacts_per_task" in body["error"]["message"]
    assert (await upload(gw, "t1", "a", b"new data", token))[0] == 201  # a replacement fits
    _, listed = await gw.call("GET", "/v1/tasks/t1/artifacts", "t1")
    assert [(item["name"], item["size"]) for item in listed["items"]] == [
        ("a", 8), ("b", 4), ("c", 4)]


async def test_a_task_keeps_at_most_max_artifact_bytes_per_task(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    gw = await start_gateway(nursery, tmp_path / "bytes.db", settings.replace(
        max_artifact_bytes=1000, max_artifact_bytes_per_task=2500), clock)
    token = await leased_task(gw)
    for name in ("a", "b"):
        assert (await upload(gw, "t1", name, b"x" * 1000, token))[0] == 201
    status, body = await upload(gw, "t1", "c", b"x" * 501, token)
    assert status == 413 and body["error"]["code"] == 4130
    assert body["error"]["message"] == (
        "task t1's artifacts would come to 2501 bytes, over the 2500 bytes a task may keep "
        "(max_artifact_bytes_per_task); 2000 bytes are taken")
    # The artifact an upload replaces counts once: its old size makes room.
    assert (await upload(gw, "t1", "a", b"x" * 999, token))[0] == 201
    assert (await upload(gw, "t1", "c", b"x" * 501, token))[0] == 201
    await until(lambda: gw.system.artifacts.deleted == 1)  # a's first version
    assert [f.split("@")[0] for f in files_under(gw.system.artifacts.root)] == [
        "t_t1/a", "t_t1/b", "t_t1/c"]  # the refused uploads left nothing behind


async def test_purge_deletes_files_off_the_message_path(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    # File work runs in threads: hold virtual time still until the sleep below.
    autojump_clock.autojump_threshold = math.inf
    token = await leased_task(gateway)
    await upload(gateway, "t1", "a", b"x", token)
    await gateway.call("POST", "/v1/tasks/t1/result", "worker", json={
        "worker_id": "w1", "lease_token": token, "outcome": "succeeded"})
    autojump_clock.autojump_threshold = 0
    autojump_clock.jump(7 * 24 * HOUR)  # retention (no need to wake every minute of it)
    await trio.sleep(61)  # then the next purge
    autojump_clock.autojump_threshold = 0.02  # from here, give the deleter's thread time
    await until(lambda: gateway.system.artifacts.deleted == 1)
    assert (await gateway.call("GET", "/v1/tasks/t1", "t1"))[0] == 404
    assert not gateway.system.artifacts.task_dir("t1").exists()
    assert gateway.system.artifacts.deleted == 1


async def test_orphan_and_staging_sweeps(gateway: Gateway, clock: Clock,
                                         autojump_clock: trio.testing.MockClock) -> None:
    store = gateway.system.artifacts
    autojump_clock.autojump_threshold = math.inf  # see the purge test
    token = await leased_task(gateway, "alive")
    await upload(gateway, "alive", "a", b"x", token)
    for name in ("t_ghost", "t_young-ghost"):
        (store.root / name).mkdir(parents=True)
        (store.root / name / "f").write_bytes(b"x")
    store.staging.mkdir(parents=True, exist_ok=True)
    (store.staging / "old-upload").write_bytes(b"x")
    (store.staging / "fresh-upload").write_bytes(b"x")
    # Ages are on the file system's clock (the sweeps' one), not the test's fixed date.
    now = time.time()
    ages = {store.root / "t_ghost": 25 * HOUR, store.root / "t_young-ghost": HOUR,
            store.task_dir("alive"): 30 * HOUR,
            store.staging / "old-upload": 2 * HOUR, store.staging / "fresh-upload": 0.0}
    for path, age in ages.items():
        os.utime(path, (now - age, now - age))
    autojump_clock.autojump_threshold = 0
    await trio.sleep(HOUR - 1)

    def orphan_sweep() -> tuple[int, int]:
        [job] = [j for j in gateway.system.statistics().jobs if j.name == "sweep_orphan_dirs"]
        return job.runs, job.failures

    autojump_clock.autojump_threshold = 0.02  # from here, give the sweep's threads time
    await until(lambda: sum(orphan_sweep()) >= 1)  # hourly
    assert orphan_sweep() == (1, 0)
    assert sorted(p.name for p in store.root.iterdir()) == [
        ".staging", "t_alive", "t_young-ghost"]
    assert [p.name for p in store.staging.iterdir()] == ["fresh-upload"]  # not over an hour yet
    jobs = {f"{job.owner}.{job.name}": job.runs for job in gateway.system.statistics().jobs}
    assert jobs["artifacts.sweep_orphan_dirs"] == 1 and jobs["artifacts.sweep_staging"] >= 1
