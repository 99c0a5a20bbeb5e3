"""Every periodic job runs in the served process, seen by its effect.

A job can exist, pass every unit test that calls it, and never run: the loop
that should call it lost its start-up call. So each job here is proven on a
real ``leasegate serve`` with short settings, by what it does to the public
surface (a row gone: 404 or absent from a list; a task's state; a hold refunded:
the account and the holds list; a file gone from the data directory; the
rate-limit bucket table's size on ``/metrics``), never by its own run counters.
Two served gateways, each shared by its module-scoped group of tests.

Two ledger states cannot be produced through the API on purpose: they are what a
crash leaves between two actors (a hold committed whose task never was; a task
ended whose settle message was lost). Those tests write that state into the
database with a second connection while the server runs, as the crash would have
left it, and watch recovery repair it.

The last tests run in process on the autojump clock: ``/health`` turns degraded
when a job has not run for three of its intervals, and ``/metrics`` says which.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

from leasegate.actors.keys.records import CreateKey
from leasegate.clock import Clock
from leasegate.http.app import create_app
from leasegate.settings import Settings
from leasegate.storage.datadir import db_path
from leasegate.system import new_system
from tests.served import Served, free_port, start, stop

Json = dict[str, Any]
T = TypeVar("T")

TENANT = "default"  # the bootstrap client key's tenant
HOUR = 3600.0

HOUSEKEEPING_ENV = {
    "LEASEGATE_HOUSEKEEPING_INTERVAL": "0.2",
    "LEASEGATE_TASK_RETENTION": "1",
    "LEASEGATE_QUERY_RETENTION": "1",
    "LEASEGATE_ID_TOMBSTONE_RETENTION": "2",
    "LEASEGATE_TASK_HARD_TIMEOUT": "1",  # the lease (120 s) never lapses first
    "LEASEGATE_LEDGER_ORPHAN_MAX_AGE": "60",
    "LEASEGATE_LEDGER_SETTLED_RETENTION": "1.5",
    "LEASEGATE_ARTIFACT_ORPHAN_SWEEP_INTERVAL": "0.2",
    "LEASEGATE_ARTIFACT_ORPHAN_MAX_AGE": "60",  # a fresh directory stays; an old one goes
    "LEASEGATE_ARTIFACT_TEMP_MAX_AGE": "60",
    # A bucket is idle (full again) one second after its last request.
    "LEASEGATE_RATE_LIMIT_PER_SECOND": "100",
    "LEASEGATE_RATE_LIMIT_BURST": "100",
    "LEASEGATE_ADDRESS_RATE_LIMIT_PER_SECOND": "100",
    "LEASEGATE_ADDRESS_RATE_LIMIT_BURST": "100",
    # An endpoint keeps one pending webhook delivery; the older ones are dropped.
    "LEASEGATE_WEBHOOK_ALLOW_PRIVATE": "1",
    "LEASEGATE_WEBHOOK_MAX_PENDING": "1",
}
RECOVERY_ENV = {
    "LEASEGATE_LEDGER_RECOVER_INTERVAL": "0.2",
    "LEASEGATE_LEDGER_ORPHAN_MAX_AGE": "1.5",
    "LEASEGATE_TASK_HARD_TIMEOUT": "1",  # the orphan age must exceed it
}
PATIENCE = 15.0  # seconds a served effect may take under load before the test fails


def eventually(probe: Callable[[], T], ok: Callable[[T], bool],
               seconds: float = PATIENCE) -> T:
    """Call ``probe`` until ``ok`` holds of what it returns (wall clock, every 50 ms)."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if ok(value):
            return value
        assert time.monotonic() < deadline, f"not reached within {seconds} s: {value!r}"
        time.sleep(0.05)


class Callers:
    """The three bootstrap keys of one served gateway, as HTTP clients."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.admin = served.client("admin")
        self.worker = served.client("worker")
        self.client = served.client("client")

    def close(self) -> None:
        for http in (self.admin, self.worker, self.client):
            http.close()

    def submit_task(self, site: str, **fields: Any) -> str:
        reply = self.client.post("/v1/tasks", json={"site": site, "kind": "export",
                                                     "params": {}, **fields})
        assert reply.status_code == 201, reply.text
        return str(reply.json()["task_id"])

    def run_task(self, site: str, **fields: Any) -> tuple[str, str]:
        """Submit, lease and start a task on ``site``; its id and lease token."""
        task_id = self.submit_task(site, **fields)
        leased = self.worker.post("/v1/tasks/lease", json={
            "worker_id": "w1", "wait_seconds": 0, "sites": [site]}).json()["items"]
        assert [item["task_id"] for item in leased] == [task_id]
        token = str(leased[0]["lease_token"])
        started = self.worker.post(f"/v1/tasks/{task_id}/start",
                                   json={"worker_id": "w1", "lease_token": token})
        assert started.status_code == 200, started.text
        return task_id, token

    def store_artifact(self, task_id: str, token: str, name: str, content: bytes) -> Json:
        """Upload an artifact of a running task (the worker's); the stored file's record."""
        stored = self.worker.put(f"/v1/tasks/{task_id}/artifacts/{name}", content=content,
                                 headers={"X-Worker-Id": "w1", "X-Lease-Token": token})
        assert stored.status_code == 201, stored.text
        return dict(stored.json())

    def task_status(self, task_id: str) -> int:
        return self.client.get(f"/v1/tasks/{task_id}").status_code

    def credit(self, amount: int, ref: str) -> None:
        reply = self.admin.post(f"/v1/ledger/accounts/{TENANT}/credit",
                                json={"amount": amount, "ref": ref})
        assert reply.status_code == 200, reply.text

    def account(self) -> Json:
        reply = self.client.get(f"/v1/ledger/accounts/{TENANT}")
        assert reply.status_code == 200, reply.text
        body: Json = reply.json()
        return body

    def hold(self, job_id: str) -> Json | None:
        reply = self.admin.get("/v1/ledger/holds", params={"account": TENANT, "limit": 100})
        assert reply.status_code == 200, reply.text
        return next((h for h in reply.json()["items"] if h["ref"] == job_id), None)

    def metric(self, name: str, **labels: str) -> float | None:
        text = self.admin.get("/metrics").text
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        found = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.MULTILINE)
        return None if found is None else float(found.group(1))


def _serve(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Callers]:
    served = start(tmp_path_factory.mktemp("periodic") / "var", env)
    callers = Callers(served)
    try:
        yield callers
    finally:
        callers.close()
        if served.process.poll() is None:
            stop(served)


@pytest.fixture(scope="module")
def housekeeping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callers]:
    yield from _serve(tmp_path_factory, HOUSEKEEPING_ENV)


@pytest.fixture(scope="module")
def recovery(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callers]:
    yield from _serve(tmp_path_factory, RECOVERY_ENV)


def artifacts_dir(callers: Callers) -> Path:
    return callers.served.data / "artifacts"


def make_old(path: Path) -> None:
    an_hour_ago = time.time() - HOUR
    os.utime(path, (an_hour_ago, an_hour_ago))


# ---- the task and query actors' purge (retention, artifacts, tombstones) -------------

def test_finished_tasks_are_purged_with_their_artifacts(housekeeping: Callers) -> None:
    task_id, token = housekeeping.run_task("purge-tasks")
    housekeeping.store_artifact(task_id, token, "report.csv", b"a,b\n1,2\n")
    task_dir = artifacts_dir(housekeeping) / f"t_{task_id}"
    assert task_dir.is_dir()
    done = housekeeping.worker.post(f"/v1/tasks/{task_id}/result", json={
        "worker_id": "w1", "lease_token": token, "outcome": "succeeded"})
    assert done.status_code == 200, done.text

    eventually(lambda: housekeeping.task_status(task_id), lambda s: s == 404)
    listed = housekeeping.client.get("/v1/tasks", params={"limit": 100}).json()["items"]
    assert task_id not in {t["task_id"] for t in listed}
    eventually(task_dir.exists, lambda there: not there)


def test_finished_queries_are_purged(housekeeping: Callers) -> None:
    submitted = housekeeping.client.post("/v1/queries", json={
        "site": "purge-queries", "kind": "balance", "params": {}})
    assert submitted.status_code == 201, submitted.text
    query_id = submitted.json()["query_id"]
    [lease] = housekeeping.worker.post("/v1/queries/lease", json={
        "worker_id": "w1", "wait_seconds": 0, "sites": ["purge-queries"]}).json()["items"]
    done = housekeeping.worker.post(f"/v1/queries/{query_id}/result", json={
        "worker_id": "w1", "lease_token": lease["lease_token"], "outcome": "succeeded",
        "result": {"balance": 1}})
    assert done.status_code == 200, done.text

    eventually(lambda: housekeeping.client.get(f"/v1/queries/{query_id}").status_code,
               lambda s: s == 404)


def test_id_tombstones_are_purged_after_their_retention(housekeeping: Callers) -> None:
    task_id = "tombstoned-1"
    housekeeping.submit_task("tombstones", task_id=task_id)
    canceled = housekeeping.client.post(f"/v1/tasks/{task_id}/cancel")
    assert canceled.status_code == 200, canceled.text
    eventually(lambda: housekeeping.task_status(task_id), lambda s: s == 404)  # purged

    def resubmit() -> int:
        return housekeeping.client.post("/v1/tasks", json={
            "task_id": task_id, "site": "tombstones", "kind": "export",
            "params": {"another": "payload"}}).status_code

    # Just purged, the tombstone keeps the id taken (2 s): another payload is 6004 ...
    assert resubmit() == 409
    # ... until the tombstone is purged too: then the id is free for a new task.
    eventually(resubmit, lambda s: s == 201)


# ---- the task actor's deadline timer: hard timeout ------------------------------------

def test_a_task_running_past_the_hard_timeout_goes_stale(housekeeping: Callers) -> None:
    task_id, _ = housekeeping.run_task("hard-timeout")
    task = eventually(lambda: housekeeping.client.get(f"/v1/tasks/{task_id}").json(),
                      lambda t: t["status"] != "running")
    assert task["status"] == "stale"
    assert task["stale_reason"].startswith("hard_timeout:"), task


# ---- the artifact sweeps ----------------------------------------------------------------

def test_unfinished_uploads_older_than_their_max_age_are_swept(housekeeping: Callers) -> None:
    staging = artifacts_dir(housekeeping) / ".staging"
    staging.mkdir(parents=True, exist_ok=True)
    old = staging / ("0" * 32)  # what a crash mid-upload leaves
    fresh = staging / ("1" * 32)
    old.write_bytes(b"half an upload")
    fresh.write_bytes(b"an upload in progress")
    make_old(old)
    eventually(old.exists, lambda there: not there)
    assert fresh.exists()  # younger than artifact_temp_max_age


def test_orphan_artifact_directories_are_swept(housekeeping: Callers) -> None:
    # A directory of a task that exists stays, however old.
    task_id, token = housekeeping.run_task("orphans")
    stored = housekeeping.store_artifact(task_id, token, "keep.txt", b"mine")
    kept = artifacts_dir(housekeeping) / f"t_{task_id}"
    make_old(kept)
    # A directory whose task record is gone (a crash before its files went) ...
    orphan = artifacts_dir(housekeeping) / "t_no-such-task"
    orphan.mkdir()
    (orphan / "lost.bin@0123").write_bytes(b"lost")
    make_old(orphan)
    young = artifacts_dir(housekeeping) / "t_no-task-yet"
    young.mkdir()
    (young / "new.bin@4567").write_bytes(b"new")
    # ... goes, once older than artifact_orphan_max_age; the others stay.
    eventually(orphan.exists, lambda there: not there)
    assert (kept / f"keep.txt@{stored['sha256']}").exists()
    assert young.exists()


# ---- the HTTP layer's idle rate-limit buckets ------------------------------------------

def test_idle_rate_limit_buckets_are_dropped(housekeeping: Callers) -> None:
    assert housekeeping.client.get("/v1/tasks").status_code == 200
    assert housekeeping.worker.get("/health").status_code == 200  # public: the address pays
    assert housekeeping.worker.post("/v1/tasks/lease", json={
        "worker_id": "w1", "wait_seconds": 0, "sites": ["buckets"]}).status_code == 200
    # admin, client and worker each hold a key bucket; this address one.
    assert housekeeping.metric("leasegate_rate_limit_buckets", limiter="key") == 3
    assert housekeeping.metric("leasegate_rate_limit_buckets", limiter="address") == 1
    # A second later they are full again and the sweep drops them; the admin's bucket
    # is in use (each scrape takes a token).
    eventually(lambda: (housekeeping.metric("leasegate_rate_limit_buckets", limiter="key"),
                        housekeeping.metric("leasegate_rate_limit_buckets",
                                            limiter="address")),
               lambda counts: counts == (1, 0))


def test_pending_webhook_deliveries_past_their_bound_are_dropped(
        housekeeping: Callers) -> None:
    refused = f"http://127.0.0.1:{free_port()}/hooks"  # nothing listens: each stays pending
    created = housekeeping.client.post("/v1/webhooks", json={
        "url": refused, "events": ["task.succeeded"]})
    assert created.status_code == 201, created.text
    endpoint_id = created.json()["endpoint_id"]
    for _ in range(3):
        task_id, token = housekeeping.run_task("hooks")
        done = housekeeping.worker.post(f"/v1/tasks/{task_id}/result", json={
            "worker_id": "w1", "lease_token": token, "outcome": "succeeded"})
        assert done.status_code == 200, done.text

    def statuses() -> list[tuple[str, str | None]]:
        listed = housekeeping.client.get(f"/v1/webhooks/{endpoint_id}/deliveries")
        items = listed.json()["items"]
        return [(d["status"], d["last_error"]) for d in items]

    found = eventually(statuses, lambda s: [status for status, _ in s].count("failed") == 2)
    # The newest stays pending; the two older ones were failed unsent, and counted.
    assert found[0][0] == "pending"
    assert all("webhook_max_pending" in (error or "") for _, error in found[1:])
    assert re.search(r"^leasegate_webhook_deliveries_dropped_total 2\.0$",
                     housekeeping.admin.get("/metrics").text, re.MULTILINE)


# ---- the ledger: retention, recovery ---------------------------------------------------

def test_settled_holds_are_deleted_after_retention_and_the_journal_stays(
        housekeeping: Callers) -> None:
    housekeeping.credit(500, "retention-credit")
    before = housekeeping.account()
    task_id = housekeeping.submit_task("ledger-retention", max_cost=100)
    canceled = housekeeping.client.post(f"/v1/tasks/{task_id}/cancel")
    assert canceled.status_code == 200, canceled.text
    assert housekeeping.hold(task_id) is not None  # listed until 1.5 s after its settle

    eventually(lambda: housekeeping.hold(task_id), lambda h: h is None)
    assert housekeeping.account() == before  # refunded once, not again
    entries = housekeeping.client.get(f"/v1/ledger/accounts/{TENANT}/entries",
                                      params={"limit": 100}).json()["items"]
    assert sorted(e["kind"] for e in entries if e["ref"] == task_id) == ["hold", "refund"]


def write_database(callers: Callers, sql: str, *args: object) -> None:
    """One statement on the served database, from a second connection (a crash's state)."""
    conn = sqlite3.connect(db_path(callers.served.data), timeout=10)
    try:
        with conn:
            assert conn.execute(sql, args).rowcount == 1
    finally:
        conn.close()


def test_recovery_refunds_a_hold_whose_task_never_came(recovery: Callers) -> None:
    recovery.credit(1000, "orphan-credit")
    task_id = recovery.submit_task("orphan-hold", max_cost=100)
    assert recovery.account()["held"] == 100
    # The state of a crash after the hold committed and before the task did.
    write_database(recovery, "DELETE FROM tasks WHERE task_id = ?", task_id)
    assert recovery.task_status(task_id) == 404

    account = eventually(recovery.account, lambda a: a["held"] == 0)  # past the orphan age
    assert (account["available"], account["balance"]) == (1000, 1000)
    refunded = recovery.hold(task_id)
    assert refunded is not None
    assert (refunded["status"], refunded["charged"], refunded["refunded"]) == \
        ("settled", 0, 100)


def test_recovery_settles_a_hold_whose_settle_was_lost(recovery: Callers) -> None:
    recovery.credit(1000, "lost-settle-credit")
    before = recovery.account()
    task_id = recovery.submit_task("lost-settle", max_cost=100)
    # The state of a crash after the task's end committed and before the ledger heard.
    write_database(recovery, "UPDATE tasks SET status = 'succeeded', cost = 40, "
                   "completed_at = updated_at WHERE task_id = ?", task_id)

    settled = eventually(lambda: recovery.hold(task_id),
                         lambda h: h is not None and h["status"] == "settled")
    assert settled is not None and (settled["charged"], settled["refunded"]) == (40, 60)
    assert recovery.account()["balance"] == before["balance"] - 40


# ---- /health and /metrics: every job, and the overdue rule -----------------------------

async def test_health_is_degraded_when_a_job_has_not_run_for_three_intervals(
        tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    system = new_system(tmp_path / "leasegate.db", settings, clock=clock, inline_storage=True)

    async def no_files(*args: object) -> int:
        return 0

    # The artifact sweeps walk the data directory on a thread, and the autojump clock
    # runs on while a thread works: on a loaded machine a sweep took minutes of virtual
    # time and its job was overdue too (the test is of the two jobs below).
    monkeypatch.setattr(system.artifacts, "sweep_staging", no_files)
    monkeypatch.setattr(system.artifacts, "sweep_orphans", no_files)
    unblock = trio.Event()

    async def stuck(now: float) -> None:
        await unblock.wait()  # its first run (at 60 s) hangs

    async def broken(now: float) -> None:
        raise RuntimeError("a job that fails every time")

    system.add_background_job("test", "stuck", 60.0, stuck)
    system.add_background_job("test", "broken", 60.0, broken)
    app = create_app(system)
    client = app.test_client()
    async with trio.open_nursery() as nursery:
        await nursery.start(system.run)
        admin = await system.keys.ask(CreateKey("admin", "admin", None))
        auth = {"Authorization": f"Bearer {admin.key}"}

        async def health() -> Json:
            response = await client.get("/health", headers=auth)
            assert response.status_code == 200
            body: Json = await response.get_json()
            return body

        async def metric(name: str, job: str) -> str:
            response = await client.get("/metrics", headers=auth)
            text = await response.get_data(as_text=True)
            found = re.search(rf'^{name}\{{owner="test",periodic="{job}"\}} (\S+)$', text,
                              re.MULTILINE)
            assert found is not None, text
            return found.group(1)

        # Within three intervals of start-up a job that has not run yet is not overdue.
        await trio.sleep(150)
        report = await health()
        assert report["status"] == "ok", report
        assert report["checks"]["overdue_jobs"] == 0
        stuck_job = report["details"]["jobs"]["test.stuck"]
        assert (stuck_job["runs"], stuck_job["overdue"], stuck_job["every"]) == (0, False, 60)
        assert report["details"]["jobs"]["test.broken"]["failures"] == 2
        assert report["details"]["jobs"]["tasks.purge_tasks"]["runs"] == 2
        # On-demand work is listed too, and never overdue.
        assert set(report["details"]["on_demand_jobs"]) == {
            "artifacts.delete_files", "tasks.deadlines", "devices.forward_device_actions",
            "keys.revocations", "schedules.claim_due_fires", "schedules.submit_fires",
            "webhooks.deliver"}
        assert report["details"]["on_demand_jobs"]["tasks.deadlines"]["every"] is None

        await trio.sleep(31)  # 181 s: three intervals without a completed run
        report = await health()
        assert report["status"] == "degraded"
        jobs = report["details"]["jobs"]
        assert {name for name, job in jobs.items() if job["overdue"]} == {"test.stuck",
                                                                         "test.broken"}
        assert report["checks"]["overdue_jobs"] == 2
        assert report["checks"]["failing_jobs"] == 1
        assert jobs["test.broken"]["last_failure_at"] == "2026-11-30T08:03:00Z"
        assert await metric("leasegate_periodic_overdue", "stuck") == "1.0"
        assert await metric("leasegate_periodic_last_run_timestamp_seconds", "stuck") == "0.0"

        unblock.set()  # the stuck run completes now: it is no longer overdue
        await trio.sleep(1)
        report = await health()
        assert report["details"]["jobs"]["test.stuck"]["overdue"] is False
        assert report["details"]["jobs"]["test.stuck"]["runs"] == 1
        assert report["checks"]["overdue_jobs"] == 1  # the broken one still is
        assert await metric("leasegate_periodic_overdue", "stuck") == "0.0"
        assert float(await metric("leasegate_periodic_last_run_timestamp_seconds", "stuck")) \
            == pytest.approx(clock.now(), abs=2)
        system.close()
