"""The real ``leasegate serve`` as a subprocess: a query end to end, one writer, shutdown.

These run on the wall clock (a real server), so they keep every wait short.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.served import Served, free_port, start, stop


def test_query_end_to_end(served: Served) -> None:
    assert set(served.keys) == {"admin", "worker", "client"}
    with served.client("client") as upstream, served.client("worker") as worker:
        submitted = upstream.post("/v1/queries", json={
            "site": "shop", "kind": "balance", "params": {"account": "a1"}})
        assert submitted.status_code == 201
        query_id = submitted.json()["query_id"]
        leased = worker.post("/v1/queries/lease", json={"worker_id": "w1", "wait_seconds": 5})
        [lease] = leased.json()["items"]
        assert lease["query_id"] == query_id
        done = worker.post(f"/v1/queries/{query_id}/result", json={
            "worker_id": "w1", "lease_token": lease["lease_token"], "outcome": "succeeded",
            "result": {"balance": 42}})
        assert done.status_code == 200
        got = upstream.get(f"/v1/queries/{query_id}", params={"wait_seconds": 1}).json()
        assert (got["status"], got["result"]) == ("succeeded", {"balance": 42})
    assert stop(served) == 0


def test_every_periodic_job_runs_in_the_served_process(served: Served) -> None:
    time.sleep(0.8)
    with served.client("admin") as admin:
        health = admin.get("/health").json()
    jobs = health["details"]["jobs"]
    assert jobs, "no periodic jobs reported"
    assert all(job["runs"] > 0 for job in jobs.values()), jobs


def test_second_server_on_same_data_refuses(served: Served) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "leasegate.cli", "serve", "--data", str(served.data),
         "--port", str(free_port())], capture_output=True, text=True, timeout=30)
    assert second.returncode != 0
    assert "in use by another leasegate process" in second.stderr


def test_restore_refuses_while_serving_and_backup_works(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "copy.db"
    backup = subprocess.run(
        [sys.executable, "-m", "leasegate.cli", "backup", "--out", str(out), "--data",
         str(served.data)], capture_output=True, text=True, timeout=30)
    assert backup.returncode == 0 and out.stat().st_size > 0
    restore = subprocess.run(
        [sys.executable, "-m", "leasegate.cli", "restore", str(out), "--data", str(served.data)],
        capture_output=True, text=True, timeout=30)
    assert restore.returncode != 0 and "stop the server first" in restore.stderr


def test_keys_create_while_serving(served: Served) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "leasegate.cli", "keys", "create", "--role", "client",
         "--name", "cli", "--tenant", "acme", "--data", str(served.data)],
        capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    reply = httpx.get(f"{served.url}/v1/queries", timeout=10,
                      headers={"Authorization": f"Bearer {key}"})
    assert reply.status_code == 200


def test_bad_setting_stops_start_up(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "leasegate.cli", "serve", "--data", str(tmp_path / "v")],
        capture_output=True, text=True, timeout=30,
        env={**os.environ, "LEASEGATE_LEDGER_ORPHAN_MAX_AGE": "60"})
    assert run.returncode != 0 and "ledger_orphan_max_age" in run.stderr


def test_long_poll_of_a_disconnected_client_does_not_keep_the_query(served: Served) -> None:
    with served.client("worker") as gone, pytest.raises(httpx.ReadTimeout):
        gone.post("/v1/queries/lease", json={"worker_id": "gone", "wait_seconds": 30},
                  timeout=0.5)
    time.sleep(0.3)  # the server sees the disconnect and cancels the handler
    with served.client("client") as upstream, served.client("worker") as worker:
        query_id = upstream.post("/v1/queries", json={
            "site": "shop", "kind": "balance", "params": {}}).json()["query_id"]
        leased = worker.post("/v1/queries/lease",
                             json={"worker_id": "alive", "wait_seconds": 2}).json()
        assert [item["query_id"] for item in leased["items"]] == [query_id]
        assert leased["items"][0]["attempt"] == 1


def test_slow_and_idle_sockets_are_closed_but_long_polls_are_not(tmp_path: Path) -> None:
    import socket

    served = start(tmp_path / "var", {"LEASEGATE_HTTP_READ_TIMEOUT": "1.5",
                                      "LEASEGATE_MAX_WAIT_SECONDS": "1.2"})
    try:
        port = int(served.url.rsplit(":", 1)[1])
        trickler = socket.create_connection(("127.0.0.1", port))
        trickler.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finishes
        idle = socket.create_connection(("127.0.0.1", port))
        for sock in (trickler, idle):
            sock.settimeout(5)
            began = time.monotonic()
            assert sock.recv(100) == b""  # closed by the server
            assert time.monotonic() - began < 3
            sock.close()
        with served.client("worker") as worker:
            began = time.monotonic()
            reply = worker.post("/v1/queries/lease", json={"worker_id": "w", "wait_seconds": 1.2})
            assert reply.status_code == 200 and reply.json() == {"items": []}
            assert time.monotonic() - began >= 1.2
    finally:
        stop(served)


def test_artifact_of_several_megabytes_round_trips(served: Served) -> None:
    import hashlib

    data = os.urandom(5 * 1024 * 1024)
    with served.client("client") as upstream, served.client("worker") as worker:
        task_id = upstream.post("/v1/tasks", json={
            "site": "shop", "kind": "export", "params": {}}).json()["task_id"]
        lease = worker.post("/v1/tasks/lease", json={
            "worker_id": "w", "wait_seconds": 2}).json()["items"][0]
        stored = worker.put(f"/v1/tasks/{task_id}/artifacts/export.bin", content=data, headers={
            "X-Worker-Id": "w", "X-Lease-Token": lease["lease_token"]})
        assert stored.status_code == 201, stored.text
        assert stored.json()["sha256"] == hashlib.sha256(data).hexdigest()
        got = upstream.get(f"/v1/tasks/{task_id}/artifacts/export.bin")
        assert got.status_code == 200 and got.content == data
        too_big = upstream.post("/v1/queries", content=b"x" * (2 * 1024 * 1024),
                                headers={"Content-Type": "application/json"})
        assert too_big.status_code == 413  # the 1 MiB body limit still holds elsewhere
