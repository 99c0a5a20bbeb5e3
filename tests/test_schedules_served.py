"""Schedules on real ``leasegate serve`` processes (wall clock): two gateways on one
PostgreSQL database make each fire once, and the ``leasegate schedules`` commands."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests import served
from tests.test_cli_actions import cli
from tests.test_gateways_served import call, serve

Json = dict[str, Any]
TEMPLATE = {"site": "shop", "kind": "report", "params": {}}


def fired(gateway: served.Served, schedule_id: str) -> list[Json]:
    reply = call(gateway, "client", "GET", f"/v1/schedules/{schedule_id}")
    assert reply.status_code == 200, reply.text
    fires: list[Json] = reply.json()["fires"]
    return fires


def test_two_gateways_make_each_missed_fire_once(postgres_url: str, tmp_path: Path) -> None:
    a = serve(tmp_path / "var", postgres_url, {})
    b = serve(tmp_path / "var", postgres_url, {}, keys=a.keys)
    try:
        reply = call(a, "client", "PUT", "/v1/schedules/every-minute", {
            "cron": "* * * * *", "channel": "task", "template": TEMPLATE,
            "catch_up": "all", "overlap": "allow"})
        assert reply.status_code == 201, reply.text
        # As a downtime leaves it: its next fire three minutes ago (written as a crash
        # would have left it); both gateways' timers see it due within a second.
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("UPDATE schedules SET next_fire_at = next_fire_at - 180")
        deadline = time.monotonic() + 20
        while len([f for f in fired(b, "every-minute") if f["status"] == "submitted"]) < 3:
            assert time.monotonic() < deadline, fired(b, "every-minute")
            time.sleep(0.1)
        time.sleep(1.0)  # the other gateway's timer has had its turn too
        fires = fired(a, "every-minute")
        job_ids = [f["job_id"] for f in fires]
        assert len(job_ids) == len(set(job_ids)) >= 3, fires
        assert all(f["fire_at"].endswith(":00Z") for f in fires)
        tasks = call(b, "client", "GET", "/v1/tasks?limit=500").json()["items"]
        made = sorted(t["task_id"] for t in tasks if t["task_id"].startswith("every-minute@"))
        assert made == sorted(job_ids)  # each fire one job, each job one fire
        # The timer is seen running in /health of the gateway that claimed the fires.
        runs = [call(gw, "admin", "GET", "/health").json()["details"]["on_demand_jobs"][
            "schedules.claim_due_fires"]["runs"] for gw in (a, b)]
        assert sum(runs) >= 1, runs
        metrics = call(a, "admin", "GET", "/metrics").text
        assert 'owner="schedules",periodic="claim_due_fires"' in metrics
    finally:
        for gateway in (a, b):
            served.stop(gateway)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[served.Served]:
    s = served.start(tmp_path_factory.mktemp("schedules-cli") / "var",
                     {"LEASEGATE_RATE_LIMIT_PER_SECOND": "0"})
    yield s
    served.stop(s)


def test_the_schedules_commands(gateway: served.Served, capsys: pytest.CaptureFixture[str],
                                tmp_path: Path) -> None:
    out = cli(gateway, capsys, "schedules", "put", "nightly", "--tenant", "default",
              "--cron", "0 2 * * *", "--timezone", "Europe/Berlin", "--channel", "task",
              "--template", json.dumps(TEMPLATE))
    assert out.splitlines()[1].split()[:6] == ["nightly", "default", "0", "2", "*", "*"]
    body = tmp_path / "hourly.json"
    body.write_text(json.dumps({"cron": "0 * * * *", "channel": "query", "tenant": "default",
                                "template": TEMPLATE, "catch_up": "none"}))
    shown = json.loads(cli(gateway, capsys, "schedules", "put", "hourly", "--file", str(body),
                           "--overlap", "allow", "--json"))
    assert (shown["channel"], shown["catch_up"], shown["overlap"]) == ("query", "none", "allow")
    listed = cli(gateway, capsys, "schedules", "list")
    assert "SCHEDULE" in listed.splitlines()[0] and "2 of 2 schedules" in listed
    paused = json.loads(cli(gateway, capsys, "schedules", "pause", "nightly", "--reason",
                            "shop closed", "--json"))
    assert (paused["paused"], paused["next_fire_at"]) == (True, None)
    out = cli(gateway, capsys, "schedules", "trigger", "nightly")
    assert "nightly@" in out and "submitted" in out
    job_id = json.loads(cli(gateway, capsys, "schedules", "show", "nightly", "--json"))[
        "fires"][0]["job_id"]
    with gateway.client("client") as client:
        assert client.get(f"/v1/tasks/{job_id}").status_code == 200
    assert json.loads(cli(gateway, capsys, "schedules", "resume", "nightly", "--json"))[
        "paused"] is False
    assert "deleted" in cli(gateway, capsys, "schedules", "delete", "hourly")
    assert "404" in cli(gateway, capsys, "schedules", "show", "hourly", status=1)
    assert "400" in cli(gateway, capsys, "schedules", "put", "bad", "--tenant", "default",
                        "--cron", "every day", "--channel", "task", "--template", "{}",
                        status=1)
    assert "not JSON" in cli(gateway, capsys, "schedules", "put", "bad", "--template", "{",
                             status=1)


def test_an_admin_must_name_the_tenant(gateway: served.Served,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    err = cli(gateway, capsys, "schedules", "put", "x", "--cron", "0 2 * * *",
              "--channel", "task", "--template", json.dumps(TEMPLATE), status=1)
    assert "tenant is required" in err
    assert httpx.get(f"{gateway.url}/v1/schedules/x", headers={
        "Authorization": f"Bearer {gateway.keys['client']}"}).status_code == 404
