"""Sites' dispatch controls on a real ``leasegate serve``: a throttle holds whichever
workers ask, and both controls survive a restart (wall clock)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests import served


def _submit(s: served.Served, n: int, site: str, channel: str = "tasks") -> None:
    def job(i: int) -> dict[str, Any]:
        if channel == "tasks":
            return {"task_id": f"{site}-{i}", "site": site, "account": f"a{i}", "kind": "k",
                    "params": {}}
        return {"query_id": f"{site}-{i}", "site": site, "kind": "k", "params": {}}

    with s.client("client") as c:
        r = c.post(f"/v1/{channel}/batch", json={"items": [job(i) for i in range(n)]})
        assert r.status_code == 200 and all(i["status"] == 201 for i in r.json()["items"])


def test_a_site_throttled_to_2_a_second_gets_no_more_whichever_workers_ask(
        tmp_path: Path) -> None:
    s = served.start(tmp_path / "var", {"LEASEGATE_RATE_LIMIT_PER_SECOND": "0",
                                        "LEASEGATE_TASK_CLAIM_WINDOW": "60"})
    try:
        _submit(s, 40, "slow")
        _submit(s, 40, "slow", "queries")
        _submit(s, 5, "fast")
        _submit(s, 5, "fast", "queries")
        with s.client("admin") as admin:
            r = admin.put("/v1/sites/slow/throttle", json={"leases_per_second": 2})
            assert r.status_code == 200, r.text
        got: list[tuple[float, str, str]] = []  # (when, worker, site)
        stop_at = time.monotonic() + 4.0

        def worker(channel: str, worker_id: str) -> None:
            with httpx.Client(base_url=s.url, timeout=10, headers={
                    "Authorization": f"Bearer {s.keys['worker']}"}) as c:
                while time.monotonic() < stop_at:
                    r = c.post(f"/v1/{channel}/lease", json={
                        "worker_id": worker_id, "max": 10, "wait_seconds": 1})
                    assert r.status_code == 200, r.text
                    now = time.monotonic()
                    got.extend((now, worker_id, item["site"]) for item in r.json()["items"])

        started = time.monotonic()
        threads = [threading.Thread(target=worker, args=(channel, f"{channel}-w{n}"))
                   for n in range(3) for channel in ("tasks", "queries")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        elapsed = time.monotonic() - started
        slow = sorted(when for when, _, site in got if site == "slow")
        # One bucket for both channels: one at once, then one every half second, tasks
        # and queries together; never more than 2 in a second.
        assert len(slow) <= 1 + 2 * elapsed, (len(slow), elapsed)
        assert len(slow) >= 2 * 4.0 - 2, (len(slow), elapsed)  # and it does lease
        # The server spaces them half a second apart; seen from the clients, whose
        # replies may come late under load, no second holds more than three.
        for first, fourth in zip(slow, slow[3:], strict=False):
            assert fourth - first >= 1.0, slow
        askers = {w for _, w, site in got if site == "slow"}
        assert len(askers) >= 2, askers  # however many ask
        assert {w.split("-")[0] for w in askers} == {"tasks", "queries"}, askers
        assert sum(1 for _, _, site in got if site == "fast") == 10  # the rest unthrottled
    finally:
        served.stop(s)


def test_pause_and_throttle_survive_a_restart(tmp_path: Path) -> None:
    s = served.start(tmp_path / "var")
    try:
        _submit(s, 2, "shop")
        with s.client("admin") as admin:
            assert admin.post("/v1/sites/shop/pause",
                              json={"reason": "site down"}).status_code == 200
            assert admin.put("/v1/sites/other/throttle",
                             json={"leases_per_second": 0.5}).status_code == 200
    finally:
        assert served.stop(s) == 0
    s = served.restart(s)
    try:
        with s.client("worker") as worker:
            for channel in ("tasks", "queries"):
                r = worker.post(f"/v1/{channel}/lease", json={"worker_id": "w",
                                                             "wait_seconds": 0})
                assert r.json()["items"] == []
        with s.client("admin") as admin:
            items: list[dict[str, Any]] = admin.get("/v1/sites").json()["items"]
            assert [(i["site"], i["paused"], i["leases_per_second"], i["queued_tasks"])
                    for i in items] == [("other", False, 0.5, 0), ("shop", True, None, 2)]
            assert items[1]["reason"] == "site down"
            assert admin.get("/health").json()["checks"]["paused_sites"] == 1
            assert admin.post("/v1/sites/shop/resume", json={"reason": "up"}).status_code == 200
        with s.client("worker") as worker:
            r = worker.post("/v1/tasks/lease", json={"worker_id": "w", "max": 10,
                                                     "wait_seconds": 0})
            assert len(r.json()["items"]) == 2
    finally:
        served.stop(s)
