"""Faults a review found: a full or failing disk, an unexpected file error in the
deleter, cancellation on entry to the database, hashing on the event loop, two
clocks in the sweeps, forged log lines, and what one worker key may create."""

from __future__ import annotations

import errno
import hashlib
import logging
import math
import os
import re
import resource
import sqlite3
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from leasegate.actors.runtime import actor as runtime
from leasegate.clock import Clock
from leasegate.logs import escape
from leasegate.settings import Settings
from leasegate.storage import artifacts as artifact_files
from leasegate.storage import connection
from leasegate.storage.connection import Database
from tests import served as served_module
from tests.conftest import Gateway, start_gateway
from tests.served import Served
from tests.test_artifacts import files_under, leased_task, until, upload

HOUR = 3600.0
DISK_FULL = OSError(errno.ENOSPC, "No space left on device")


def assert_unavailable(status: int, body: Any) -> None:
    assert status == 503, body
    assert (body["error"]["code"], body["error"]["type"]) == (5030, "unavailable")


def warnings_with(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and text in r.getMessage()]


# ---- artifact deletions that fail: retried, skipped, logged once, counted ------------

def errors_with(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR and text in r.getMessage()]


async def delete_failures(gw: Gateway) -> dict[str, float]:
    response = await gw.client.get("/metrics", headers=gw.auth("admin"))
    text = (await response.get_data()).decode()
    return {found[0]: float(found[1]) for found in re.findall(
        r'^leasegate_artifact_delete_failures_total\{by="(\w+)"\} (\S+)$', text, re.M)}


def refusing(store: artifact_files.ArtifactStore, refused: Callable[[Path, int], bool],
             ) -> dict[str, int]:
    """Make the store's remover fail (EACCES) where ``refused(path, try)``; the tries
    made of each path, by name."""
    tries: dict[str, int] = {}

    def remove(path: Path) -> None:
        tries[path.name] = tries.get(path.name, 0) + 1
        if refused(path, tries[path.name]):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        artifact_files.remove_path(path)

    store.remove = remove
    return tries


async def test_a_failed_deletion_is_retried_then_given_up_loudly_and_counted(
        gateway: Gateway, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    store = gateway.system.artifacts
    tries = refusing(store, lambda path, n: path.name.startswith("t_broken")
                     or (path.name.startswith("a.txt@") and n == 1))
    autojump_clock.autojump_threshold = math.inf  # no jump while the uploads stream
    token = await leased_task(gateway, start=False)
    await upload(gateway, "t1", "a.txt", b"one", token)
    status, stored = await upload(gateway, "t1", "a.txt", b"two!", token)  # "one" goes
    assert status == 201
    store.discard_later([f"broken-{i}" for i in range(3)])
    autojump_clock.autojump_threshold = 0.02  # give the deleter's thread time
    await until(lambda: store.delete_failures["deleter"] == 3)
    # The replaced file failed once, then went on its retry; the others never go.
    assert store.deleted == 1 and files_under(store.root) == [f"t_t1/a.txt@{stored['sha256']}"]
    assert sorted(tries.values()) == [2] + [artifact_files.DELETE_ATTEMPTS] * 3
    [line] = errors_with(caplog, "could not delete")  # at most one per error_log_window
    assert "after 4 attempts" in line and "Permission denied" in line
    assert (await delete_failures(gateway))["deleter"] == 3
    [deleter] = [s for s in gateway.system.statistics().services if s.name == "delete_files"]
    assert deleter.failures == 0  # the deleter itself goes on


async def test_the_staging_sweep_skips_a_file_it_cannot_delete_and_goes_on(
        gateway: Gateway, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    store = gateway.system.artifacts
    refused: list[str] = []  # the first file the sweep meets, whichever it is

    def first_met(path: Path, _: int) -> bool:
        if not refused:
            refused.append(path.name)
        return path.name == refused[0]

    tries = refusing(store, first_met)
    store.staging.mkdir(parents=True)
    old = time.time() - 2 * HOUR  # older than artifact_temp_max_age
    for i in range(5):
        (store.staging / f"upload-{i}").write_bytes(b"x")
        os.utime(store.staging / f"upload-{i}", (old, old))
    autojump_clock.autojump_threshold = 0.02
    await until(lambda: len(tries) == 5)
    assert [p.name for p in store.staging.iterdir()] == refused
    [line] = errors_with(caplog, "staging_sweep could not delete")
    assert "the next sweep tries again" in line
    assert (await delete_failures(gateway))["staging_sweep"] >= 1


# ---- Database.run: cancellation on entry, both modes --------------------------------

@pytest.mark.parametrize("inline", [True, False])
async def test_a_cancelled_caller_runs_nothing_in_either_mode(tmp_path: Path,
                                                              inline: bool) -> None:
    db = Database.open(tmp_path / "x.db", synchronous="OFF", inline=inline)
    ran: list[int] = []
    try:
        with trio.CancelScope() as scope:
            scope.cancel()
            await db.run(lambda _conn: ran.append(1))
        assert scope.cancelled_caught and ran == []
        assert await db.run(lambda conn: conn.execute("SELECT 7").fetchone()[0]) == 7
    finally:
        await db.stop()


# ---- uploads: hashed off the event loop, 503 on a full disk -----------------------------

async def test_uploads_are_hashed_and_written_off_the_event_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.current_thread()
    hashed_on: set[threading.Thread] = set()
    sha256 = hashlib.sha256

    class Recording:  # hashlib's sha256, telling on which thread it hashes
        def __init__(self, data: bytes = b"", **options: Any) -> None:
            self.inner = sha256(data, **options)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def update(self, data: bytes) -> None:
            hashed_on.add(threading.current_thread())
            self.inner.update(data)

        def hexdigest(self) -> str:
            return self.inner.hexdigest()

    monkeypatch.setattr(hashlib, "sha256", Recording)  # read by the store per upload
    pieces = [bytes([i]) * 300_000 for i in range(10)]  # 3 MB in uneven buffers

    async def chunks() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    staged = await artifact_files.ArtifactStore(tmp_path).stage(chunks(), limit=10**7)
    data = b"".join(pieces)
    assert (staged.size, staged.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert staged.path.read_bytes() == data
    assert hashed_on and loop_thread not in hashed_on


async def test_a_full_disk_is_503_for_an_upload_and_leaves_nothing(
        gateway: Gateway, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    token = await leased_task(gateway)
    real_write = artifact_files._write
    monkeypatch.setattr(artifact_files, "_write", partial(_raise, DISK_FULL))
    for _ in range(20):
        assert_unavailable(*await upload(gateway, "t1", "out.csv", b"x" * 5000, token))
    assert files_under(gateway.system.artifacts.root) == []  # no staged leftovers
    assert len(warnings_with(caplog, "artifact storage failing")) == 1  # not 20
    monkeypatch.setattr(artifact_files, "_write", real_write)  # space again
    status, stored = await upload(gateway, "t1", "out.csv", b"x" * 5000, token)
    assert status == 201 and stored["size"] == 5000


async def test_a_full_disk_is_503_for_a_backup_and_leaves_no_partial_file(
        gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "replace", partial(_raise, DISK_FULL))  # the last step of a backup
    assert_unavailable(*await gateway.call("POST", "/v1/admin/backup", "admin"))
    backups = gateway.system.db_path.parent / "backups"
    assert list(backups.iterdir()) == []  # the 0-byte .partial is gone too
    monkeypatch.undo()
    status, made = await gateway.call("POST", "/v1/admin/backup", "admin")
    assert status == 200 and (await trio.Path(made["path"]).stat()).st_size == made["bytes"] > 0


async def test_a_failing_database_is_logged_once_per_window_not_per_request(
        gateway: Gateway, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    db = gateway.system.task_actor.db
    real_run = db.run

    async def full(fn: Callable[[sqlite3.Connection], Any]) -> Any:
        await trio.lowlevel.checkpoint()
        exc = sqlite3.OperationalError("database or disk is full")
        exc.sqlite_errorcode = sqlite3.SQLITE_FULL
        raise exc

    monkeypatch.setattr(db, "run", full)
    body = {"site": "shop", "kind": "export"}
    for _ in range(30):
        assert_unavailable(*await gateway.call("POST", "/v1/tasks", "t1", json=body))
    assert len(warnings_with(caplog, "storage failure, batch")) == 1
    response = await gateway.client.post("/v1/tasks", json=body, headers=gateway.auth("t1"))
    assert response.headers["Retry-After"] == "1"  # the SDK waits, then retries
    monkeypatch.setattr(db, "run", real_run)
    assert (await gateway.call("POST", "/v1/tasks", "t1", json=body))[0] == 201
    assert warnings_with(caplog, "tasks: storage works again")


async def test_only_a_commit_that_wrote_says_the_storage_works_again(
        gateway: Gateway, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A full disk fails every commit that writes; one that only read goes through,
    and proves nothing about the disk."""
    body = {"task_id": "t-read", "site": "shop", "kind": "export"}
    assert (await gateway.call("POST", "/v1/tasks", "t1", json=body))[0] == 201
    changes_at_begin: dict[int, int] = {}

    def begin(conn: sqlite3.Connection) -> None:
        real_begin(conn)
        changes_at_begin[id(conn)] = conn.total_changes

    def commit(conn: sqlite3.Connection) -> None:
        if conn.total_changes != changes_at_begin[id(conn)]:
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorcode = sqlite3.SQLITE_FULL
            raise exc
        real_commit(conn)

    real_begin, real_commit = connection.begin, connection.commit
    monkeypatch.setattr(runtime, "begin", begin)
    monkeypatch.setattr(runtime, "commit", commit)
    assert_unavailable(*await gateway.call("POST", "/v1/tasks", "t1",
                                           json={**body, "task_id": "t-full"}))
    assert len(warnings_with(caplog, "tasks: storage failure")) == 1
    assert (await gateway.call("GET", "/v1/tasks/t-read", "t1"))[0] == 200  # a read turn
    assert not warnings_with(caplog, "storage works again")
    monkeypatch.undo()  # space again
    assert (await gateway.call("POST", "/v1/tasks", "t1",
                               json={**body, "task_id": "t-full"}))[0] == 201
    assert len(warnings_with(caplog, "tasks: storage works again")) == 1


def _raise(exc: BaseException, *args: object, **kwargs: object) -> None:
    raise exc


def test_an_upload_past_the_file_size_limit_is_503_in_the_served_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real write error (EFBIG under RLIMIT_FSIZE, as ENOSPC would be), served."""
    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 * 2**20, 2 * 2**20))

    monkeypatch.setattr(subprocess, "Popen",  # served.start's
                        partial(subprocess.Popen, preexec_fn=limit_file_size))
    served = served_module.start(tmp_path / "var")
    try:
        with served.client("client") as client, served.client("worker") as worker:
            assert client.post("/v1/tasks", json={"task_id": "t1", "site": "shop",
                                                  "kind": "export"}).status_code == 201
            [lease] = worker.post("/v1/tasks/lease",
                                  json={"worker_id": "w1"}).json()["items"]
            fence = {"X-Worker-Id": "w1", "X-Lease-Token": lease["lease_token"]}
            response = worker.put("/v1/tasks/t1/artifacts/big.bin", content=b"x" * 3 * 2**20,
                                  headers=fence)
            assert_unavailable(response.status_code, response.json())
        # A new connection: the rest of a body answered early is item 1's business.
        with served.client("worker") as worker:
            assert worker.put("/v1/tasks/t1/artifacts/small.bin", content=b"x",
                              headers=fence).status_code == 201
        assert [p.name for p in (served.data / "artifacts" / ".staging").iterdir()] == []
    finally:
        assert served_module.stop(served) == 0


# ---- sweeps: file ages on the file system's clock -----------------------------------------

async def test_sweeps_age_files_by_the_clock_that_stamped_them(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings,
        autojump_clock: trio.testing.MockClock) -> None:
    # The gateway's clock is ten hours ahead of the file system's (a suspend, an NTP
    # step): a fresh upload must not look ten hours old.
    gw = await start_gateway(nursery, tmp_path / "x.db",
                             settings.replace(housekeeping_interval=1.0),
                             Clock(time.time() + 10 * HOUR))
    store = gw.system.artifacts
    store.staging.mkdir(parents=True)
    (store.staging / "uploading").write_bytes(b"x")
    abandoned = store.staging / "abandoned"
    abandoned.write_bytes(b"x")
    stamp = time.time() - 2 * HOUR
    (store.root / "t_ghost").mkdir()
    for path in (abandoned, store.root / "t_ghost"):
        os.utime(path, (stamp, stamp))
    autojump_clock.autojump_threshold = 0.02
    await until(lambda: not abandoned.exists())
    assert [p.name for p in store.staging.iterdir()] == ["uploading"]
    assert (store.root / "t_ghost").exists()  # 2 h old, orphans go at 24 h


# ---- log lines callers cannot forge ----------------------------------------------------

def test_escape_shows_control_characters() -> None:
    assert escape("plain text, ünïcode") == "plain text, ünïcode"
    assert escape("a\nb\r\x1b[31m\u2028\\n") == "a\\nb\\r\\x1b[31m\\u2028\\\\n"
    assert escape("x" * 5000).endswith("…(+3000 chars)")


async def test_a_worker_message_with_newlines_is_one_log_line(
        gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    token = await leased_task(gateway)
    forged = "boom\n2026-11-30 08:00:00 INFO leasegate.tasks task succeeded\x1b[2J"
    status, done = await gateway.call("POST", "/v1/tasks/t1/result", "worker", json={
        "worker_id": "w1", "lease_token": token, "outcome": "failed",
        "error": {"code": 17, "message": forged}})
    assert status == 200 and done["error"]["message"] == forged  # stored as sent
    [line] = warnings_with(caplog, "task failed")
    assert "\n" not in line and "\x1b" not in line
    assert "boom\\n2026-11-30 08:00:00 INFO" in line and "\\x1b[2J" in line


# ---- workers per key -------------------------------------------------------------------

async def lease(gw: Gateway, worker_id: str) -> tuple[int, Any]:
    return await gw.call("POST", "/v1/tasks/lease", "worker",
                         json={"worker_id": worker_id, "wait_seconds": 0})


async def test_a_key_has_at_most_max_workers_per_key_workers(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    gw = await start_gateway(nursery, tmp_path / "x.db",
                             settings.replace(max_workers_per_key=3), clock)
    await leased_task(gw, "held")  # w1 holds a task: never made room for
    for worker_id in ("w2", "w3"):
        assert (await lease(gw, worker_id))[0] == 200
    status, body = await lease(gw, "w4")
    assert (status, body["error"]["code"], body["error"]["type"]) == (429, 4290, "rate_limited")
    assert "max_workers_per_key is 3" in body["error"]["message"]
    _, workers = await gw.call("GET", "/v1/workers", "admin")
    assert sorted(w["worker_id"] for w in workers["items"]) == ["w1", "w2", "w3"]
    assert (await lease(gw, "w3"))[0] == 200  # known workers keep working
    await trio.sleep(60)
    assert (await lease(gw, "w3"))[0] == 200
    await trio.sleep(31)  # w2 is offline now (90 s); w1 too, but it holds a task
    assert (await lease(gw, "w4"))[0] == 200
    _, workers = await gw.call("GET", "/v1/workers", "admin")
    assert sorted(w["worker_id"] for w in workers["items"]) == ["w1", "w3", "w4"]
    assert (await lease(gw, "w5"))[0] == 429  # w1 holds a task, w3 and w4 are online


def test_served_workers_per_key_and_names_with_a_trailing_newline(tmp_path: Path) -> None:
    served = served_module.start(tmp_path / "var", {"LEASEGATE_MAX_WORKERS_PER_KEY": "2"})
    try:
        _served_checks(served)
    finally:
        assert served_module.stop(served) == 0


def _served_checks(served: Served) -> None:
    with served.client("client") as client, served.client("worker") as worker:
        assert client.post("/v1/tasks", json={"task_id": "t1", "site": "shop",
                                              "kind": "export"}).status_code == 201
        [item] = worker.post("/v1/tasks/lease", json={"worker_id": "w1"}).json()["items"]
        fence = {"X-Worker-Id": "w1", "X-Lease-Token": item["lease_token"]}
        # "$" would match before the newline: the name must be refused, not stored.
        response = worker.put("/v1/tasks/t1/artifacts/a.txt%0A", content=b"x", headers=fence)
        assert (response.status_code, response.json()["error"]["code"]) == (400, 4000)
        assert client.get("/v1/tasks/t1/artifacts").json()["items"] == []
        assert client.get("/v1/tasks/t1%0A").status_code == 400
        assert not (served.data / "artifacts" / "t_t1").exists()

        second = worker.post("/v1/tasks/lease", json={"worker_id": "w2", "wait_seconds": 0})
        assert second.status_code == 200
        refused = worker.post("/v1/tasks/lease", json={"worker_id": "w3", "wait_seconds": 0})
        assert (refused.status_code, refused.json()["error"]["code"]) == (429, 4290)
        assert int(refused.headers["Retry-After"]) >= 1
        again = worker.post("/v1/tasks/lease", json={"worker_id": "w1", "wait_seconds": 0})
        assert again.status_code == 200  # a known worker keeps working
    with served.client("admin") as admin:
        assert admin.get("/v1/workers").json()["total"] == 2
    assert httpx.get(f"{served.url}/health", timeout=10).status_code == 200

