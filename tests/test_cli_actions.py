"""The operator's commands on a running gateway (``leasegate tasks|queries|sites ...``),
each in its human form and with ``--json``, against a real ``leasegate serve``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leasegate.cli import main
from tests import served

Json = dict[str, Any]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[served.Served]:
    s = served.start(tmp_path_factory.mktemp("cli") / "var",
                     {"LEASEGATE_TASK_LEASE_TTL": "1", "LEASEGATE_RATE_LIMIT_PER_SECOND": "0"})
    yield s
    served.stop(s)


def cli(gw: served.Served, capsys: pytest.CaptureFixture[str], *args: str,
        status: int = 0) -> str:
    code = main([*args, "--url", gw.url, "--key", gw.keys["admin"]])
    out, err = capsys.readouterr()
    assert code == status, (out, err)
    return out if status == 0 else err


def cli_json(gw: served.Served, capsys: pytest.CaptureFixture[str], *args: str) -> Json:
    reply: Json = json.loads(cli(gw, capsys, *args, "--json"))
    return reply


def submit(gw: served.Served, task_id: str, site: str = "shop") -> None:
    with gw.client("client") as c:
        r = c.post("/v1/tasks", json={"task_id": task_id, "site": site, "account": task_id,
                                      "kind": "k", "params": {}})
        assert r.status_code == 201, r.text


def lease(gw: served.Served, channel: str = "tasks", sites: list[str] | None = None,
          ) -> list[Json]:
    with gw.client("worker") as c:
        body: Json = {"worker_id": "w1", "wait_seconds": 0, "max": 10}
        if sites:
            body["sites"] = sites
        r = c.post(f"/v1/{channel}/lease", json=body)
        assert r.status_code == 200, r.text
        items: list[Json] = r.json()["items"]
        return items


def fail(gw: served.Served, task_id: str, site: str = "shop") -> None:
    submit(gw, task_id, site)
    (item,) = [i for i in lease(gw, sites=[site]) if i["task_id"] == task_id]
    fenced = {"worker_id": "w1", "lease_token": item["lease_token"]}
    with gw.client("worker") as c:
        assert c.post(f"/v1/tasks/{task_id}/start", json=fenced).status_code == 200
        r = c.post(f"/v1/tasks/{task_id}/result", json={**fenced, "outcome": "failed"})
        assert r.json()["status"] == "failed"


def test_tasks_cancel(gateway: served.Served, capsys: pytest.CaptureFixture[str]) -> None:
    submit(gateway, "cc1", "cancel-site")
    out = cli(gateway, capsys, "tasks", "cancel", "cc1", "--reason", "not wanted")
    assert out.startswith("task cc1\n") and "status    canceled" in out
    submit(gateway, "cc2", "cancel-site")
    assert cli_json(gateway, capsys, "tasks", "cancel", "cc2")["status"] == "canceled"
    err = cli(gateway, capsys, "tasks", "cancel", "cc2", status=1)
    assert err.startswith("leasegate: 409 state_conflict (6003): ")


def test_tasks_resume(gateway: served.Served, capsys: pytest.CaptureFixture[str]) -> None:
    with gateway.client("client") as c, gateway.client("admin") as admin:
        for task_id in ("rs1", "rs2"):  # batch tasks, paused while queued
            r = c.post("/v1/tasks", json={"task_id": task_id, "site": "resume-site",
                                          "account": task_id, "kind": "k", "params": {},
                                          "batch_total": 10})
            assert r.status_code == 201, r.text
        assert admin.post("/v1/tasks/rs1/pause").json()["status"] == "paused"
    assert cli_json(gateway, capsys, "tasks", "pause", "rs2", "--reason", "hold on")[
        "status"] == "paused"
    out = cli(gateway, capsys, "tasks", "resume", "rs1", "--reason", "go on")
    assert out.startswith("task rs1\n") and "status    queued" in out
    assert cli_json(gateway, capsys, "tasks", "resume", "rs2")["status"] == "queued"
    err = cli(gateway, capsys, "tasks", "resume", "no-such-task", status=1)
    assert err.startswith("leasegate: 404 ")


def test_tasks_retry(gateway: served.Served, capsys: pytest.CaptureFixture[str]) -> None:
    fail(gateway, "rt1", "retry-site")
    out = cli(gateway, capsys, "tasks", "retry", "rt1", "--reason", "fixed")
    assert "status    queued" in out
    cli(gateway, capsys, "tasks", "cancel", "rt1")
    assert cli_json(gateway, capsys, "tasks", "retry", "rt1", "--reason", "again")[
        "status"] == "queued"
    assert "6003" in cli(gateway, capsys, "tasks", "retry", "rt1", "--reason", "x", status=1)


def test_tasks_reclaim(gateway: served.Served, capsys: pytest.CaptureFixture[str]) -> None:
    for task_id in ("st1", "st2"):
        submit(gateway, task_id, "stale-site")
        (item,) = [i for i in lease(gateway, sites=["stale-site"])]
        with gateway.client("worker") as c:
            r = c.post(f"/v1/tasks/{task_id}/start",
                       json={"worker_id": "w1", "lease_token": item["lease_token"]})
            assert r.status_code == 200
        deadline = time.monotonic() + 10
        while _status(gateway, task_id) != "stale":  # the lease (1 s) lapses
            assert time.monotonic() < deadline
            time.sleep(0.1)
    result = '{"big":123456789012345678901234567890,"order":"A-1","total":1.50e2}'
    out = cli(gateway, capsys, "tasks", "reclaim", "st1", "--action", "succeeded",
              "--reason", "the order is on the site", "--result", result)
    assert "status    succeeded" in out
    with gateway.client("client") as c:  # the result as written, each number literal
        assert f'"result":{result}' in c.get("/v1/tasks/st1").text
    reply = cli_json(gateway, capsys, "tasks", "reclaim", "st2", "--action", "failed",
                     "--reason", "nothing placed")
    assert reply["status"] == "failed" and reply["reclaim"]["action"] == "failed"
    assert "--result is not JSON" in cli(gateway, capsys, "tasks", "reclaim", "st2",
                                         "--action", "succeeded", "--reason", "x",
                                         "--result", "{", status=1)


def _status(gw: served.Served, task_id: str) -> str:
    with gw.client("admin") as c:
        status: str = c.get(f"/v1/tasks/{task_id}").json()["status"]
        return status


def test_tasks_redrive(gateway: served.Served, capsys: pytest.CaptureFixture[str]) -> None:
    for n in range(3):
        fail(gateway, f"rd{n}", "redrive-site")
    base = ("tasks", "redrive", "--status", "failed", "--site", "redrive-site",
            "--reason", "outage over")
    assert cli(gateway, capsys, *base, "--dry-run") == (
        "matched 3, requeued 0 (a dry run changes nothing)\n")
    assert cli_json(gateway, capsys, *base, "--dry-run") == {"matched": 3, "requeued": 0}
    assert cli_json(gateway, capsys, *base, "--limit", "1") == {"matched": 3, "requeued": 1}
    assert cli(gateway, capsys, *base) == "matched 2, requeued 2\n"


def test_queries_retry_and_redrive(gateway: served.Served,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with gateway.client("client") as c:
        for n in range(2):
            r = c.post("/v1/queries", json={"query_id": f"qr{n}", "site": "q-site",
                                            "kind": "k", "params": {}, "max_attempts": 1})
            assert r.status_code == 201
    with gateway.client("worker") as c:
        for item in lease(gateway, "queries", ["q-site"]):
            c.post(f"/v1/queries/{item['query_id']}/result",
                   json={"worker_id": "w1", "lease_token": item["lease_token"],
                         "outcome": "failed"})
    out = cli(gateway, capsys, "queries", "retry", "qr0", "--reason", "up")
    assert out.startswith("query qr0\n") and "status    queued" in out
    assert cli_json(gateway, capsys, "queries", "redrive", "--status", "failed",
                    "--site", "q-site", "--reason", "up") == {"matched": 1, "requeued": 1}
    assert cli(gateway, capsys, "queries", "redrive", "--status", "failed", "--site",
               "q-site", "--reason", "up") == "matched 0, requeued 0\n"
    assert "6003" in cli(gateway, capsys, "queries", "retry", "qr1", "--reason", "x",
                         status=1)


def test_sites(gateway: served.Served, capsys: pytest.CaptureFixture[str]) -> None:
    submit(gateway, "s1", "site-a")
    out = cli(gateway, capsys, "sites", "pause", "site-a", "--reason", "maintenance")
    assert out.splitlines()[1].split() == ["site-a", "paused", "-", "1", "0", "maintenance"]
    assert lease(gateway, sites=["site-a"]) == []
    listed = cli(gateway, capsys, "sites", "list")
    assert "SITE" in listed.splitlines()[0] and any(
        line.split()[:2] == ["site-a", "paused"] for line in listed.splitlines())
    page = cli_json(gateway, capsys, "sites", "list")
    assert {"site": "site-a", "paused": True}.items() <= next(
        s for s in page["items"] if s["site"] == "site-a").items()
    assert cli_json(gateway, capsys, "sites", "resume", "site-a", "--reason", "done")[
        "paused"] is False
    out = cli(gateway, capsys, "sites", "throttle", "site-a", "--rate", "2.5")
    assert out.splitlines()[1].split()[:3] == ["site-a", "-", "2.5/s"]
    assert cli_json(gateway, capsys, "sites", "throttle", "site-a", "--off")[
        "leases_per_second"] is None
    refused = cli(gateway, capsys, "sites", "throttle", "site-a", "--rate", "0", status=2)
    assert "--rate must be more than 0" in refused


def test_without_a_key_or_a_gateway(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEASEGATE_ADMIN_KEY", raising=False)
    assert main(["sites", "list"]) == 2
    assert "an admin key is needed" in capsys.readouterr().err
    port = served.free_port()
    assert main(["sites", "list", "--url", f"http://127.0.0.1:{port}", "--key", "k"]) == 1
    assert capsys.readouterr().err.startswith(f"leasegate: cannot reach http://127.0.0.1:{port}")


def test_reclaim_stale_previews_then_resolves(gateway: served.Served,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    submit(gateway, "st-1", site="lapsing")
    [item] = lease(gateway, sites=["lapsing"])
    with gateway.client("worker") as c:
        assert c.post("/v1/tasks/st-1/start", json={
            "worker_id": "w1", "lease_token": item["lease_token"]}).status_code == 200
    with gateway.client("admin") as c:
        for _ in range(100):  # its lease (1 s) lapses: stale
            if c.get("/v1/tasks/st-1").json()["status"] == "stale":
                break
            time.sleep(0.1)
    out = cli(gateway, capsys, "tasks", "reclaim-stale", "--action", "requeue", "--reason",
              "checked", "--site", "lapsing", "--dry-run")
    assert out.strip() == "matched 1 stale, reclaimed 0 (a dry run changes nothing)"
    assert cli_json(gateway, capsys, "tasks", "reclaim-stale", "--action", "failed",
                    "--reason", "checked", "--site", "lapsing") == {"matched": 1, "reclaimed": 1}
    with gateway.client("admin") as c:
        assert c.get("/v1/tasks/st-1").json()["status"] == "failed"
