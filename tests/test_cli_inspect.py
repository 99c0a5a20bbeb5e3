"""``leasegate tasks|queries list|show`` against a served gateway and ``leasegate keys
list|revoke`` on its database, each as a table and as ``--json``; ``backup --out``
that will not overwrite; ``serve`` on a busy port that leaves nothing behind."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from leasegate.cli import main
from leasegate.http.server.auth import VERIFIED_SECONDS
from tests.conftest import Gateway
from tests.served import Served, start, stop
from tests.test_cli import run_cli


@pytest.fixture(scope="module")
def served_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # A started task whose worker goes quiet turns stale 1 s after its start; a failed
    # query waits minutes for its retry (the module's tests see it waiting).
    served = start(tmp_path_factory.mktemp("inspect") / "var", {
        "LEASEGATE_TASK_LEASE_TTL": "1", "LEASEGATE_QUERY_RETRY_BASE_SECONDS": "300"})
    try:
        client, worker = served.client("client"), served.client("worker")
        for task_id, params in (("bulk-0", {"iban": "DE44"}), ("bulk-1", {"iban": "FR76"}),
                                ("other", {"iban": "NL91"})):
            assert client.post("/v1/tasks", json={
                "task_id": task_id, "site": "bank", "account": task_id, "kind": "transfer",
                "params": params}).status_code == 201
        assert client.post("/v1/queries", json={"query_id": "q-1", "site": "bank",
                                                "kind": "balance"}).status_code == 201
        [lease] = worker.post("/v1/tasks/lease", json={
            "worker_id": "desk-1", "wait_seconds": 0}).json()["items"]
        fence = {"worker_id": "desk-1", "lease_token": lease["lease_token"]}
        assert worker.post(f"/v1/tasks/{lease['task_id']}/start", json=fence).status_code == 200
        assert worker.post(f"/v1/tasks/{lease['task_id']}/result", json={
            **fence, "outcome": "failed", "error": {
                "message": "account locked", "type": "bank.Locked",
                "traceback": "Traceback (most recent call last):\n  File \"w.py\"\n"}}
        ).status_code == 200
        served.env["failed"] = lease["task_id"]
        assert client.post("/v1/queries", json={"query_id": "q-retry", "site": "bank-q",
                                                "kind": "statement"}).status_code == 201
        [lease] = worker.post("/v1/queries/lease", json={
            "worker_id": "desk-1", "wait_seconds": 0, "sites": ["bank-q"]}).json()["items"]
        assert worker.post("/v1/queries/q-retry/result", json={
            "worker_id": "desk-1", "lease_token": lease["lease_token"], "outcome": "failed",
            "error": {"code": 503, "message": "bank offline", "type": "bank.Offline"}}
        ).status_code == 200  # retried later: queued, its error kept
        yield served
    finally:
        stop(served)


def cli(capsys: pytest.CaptureFixture[str], served: Served, *args: str) -> tuple[int, str]:
    status = main([*args, "--url", served.url, "--key", served.keys["admin"]])
    captured = capsys.readouterr()
    return status, captured.out if status == 0 else captured.err


def test_tasks_list_as_a_table_and_as_json(served_gateway: Served,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    status, out = cli(capsys, served_gateway, "tasks", "list", "--id", "bulk-")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["TASK", "STATUS", "KIND", "SITE", "ACCOUNT", "TENANT",
                                "WORKER", "CREATED"]
    assert [line.split()[0] for line in lines[1:3]] == ["bulk-1", "bulk-0"]
    assert lines[-1] == "1-2 of 2 tasks, newest first"
    status, out = cli(capsys, served_gateway, "tasks", "list", "--text", "fr76", "--json")
    assert status == 0
    page = json.loads(out)
    assert [t["task_id"] for t in page["items"]] == ["bulk-1"]
    assert page["searched"] == {"rows": 3, "complete": True}
    status, out = cli(capsys, served_gateway, "tasks", "list", "--status", "failed",
                      "--worker", "desk-1")
    assert status == 0 and served_gateway.env["failed"] in out and "desk-1" in out


def test_tasks_show_as_text_and_as_json(served_gateway: Served,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    failed = served_gateway.env["failed"]
    status, out = cli(capsys, served_gateway, "tasks", "show", failed)
    assert status == 0
    assert any(line.split() == ["task_id", failed] for line in out.splitlines())
    assert "status" in out and "failed" in out
    assert "error: bank.Locked: account locked" in out
    assert '  File "w.py"' in out  # the traceback, indented
    assert '"iban":' in out
    assert "  desk-1  bank.Locked: account locked" in out.split("attempts' errors", 1)[1]
    status, out = cli(capsys, served_gateway, "tasks", "show", failed, "--json")
    assert status == 0 and json.loads(out)["error"]["type"] == "bank.Locked"


def test_tasks_show_ends_with_the_history(served_gateway: Served,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    status, out = cli(capsys, served_gateway, "tasks", "show", served_gateway.env["failed"])
    assert status == 0
    history = out[out.index("history:\n"):].splitlines()[1:]
    assert [line.split()[4] for line in history] == ["queued", "leased", "running", "failed"]
    assert history[0].split()[3] == "submitted" and "worker_id=desk-1" in history[-1]
    assert all(line.split()[2] == "UTC" for line in history)  # the zone, as everywhere


def test_tasks_list_puts_stale_tasks_first(served_gateway: Served,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    client, worker = served_gateway.client("client"), served_gateway.client("worker")
    assert client.post("/v1/tasks", json={"task_id": "stuck", "site": "mint", "kind": "k",
                                          "params": {}}).status_code == 201
    [lease] = worker.post("/v1/tasks/lease", json={
        "worker_id": "desk-2", "wait_seconds": 0, "sites": ["mint"]}).json()["items"]
    fence = {"worker_id": "desk-2", "lease_token": lease["lease_token"]}
    assert worker.post("/v1/tasks/stuck/start", json=fence).status_code == 200
    for _ in range(100):  # its lease (1 s) lapses: stale
        if client.get("/v1/tasks/stuck").json()["status"] == "stale":
            break
        time.sleep(0.1)
    status, out = cli(capsys, served_gateway, "tasks", "list")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("1 stale, waiting for an operator")
    assert lines[2].split()[:2] == ["stuck", "stale"]
    status, out = cli(capsys, served_gateway, "tasks", "list", "--site", "bank")
    assert status == 0 and "stale" not in out  # the filters hold for the stale part too


def test_workers_lists_what_each_worker_holds(served_gateway: Served,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    status, out = cli(capsys, served_gateway, "workers")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["WORKER", "STATE", "LAST", "SEEN", "CHANNELS", "SITES", "TASKS"]
    assert any(line.split()[0] == "desk-1" for line in lines[1:-1])
    assert lines[-1].endswith("online") and "workers" in lines[-1]
    status, out = cli(capsys, served_gateway, "workers", "--json")
    assert status == 0 and "desk-1" in {w["worker_id"] for w in json.loads(out)["items"]}


def test_help_names_every_command_and_each_action_says_what_it_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("serve", "tasks", "queries", "sites", "workers", "keys", "backup",
                    "restore"):
        assert command in out.split("positional arguments:")[0], command
    with pytest.raises(SystemExit):
        main(["tasks", "retry", "--help"])
    out = capsys.readouterr().out
    assert "Retry a failed or expired task as a new attempt" in out


def test_a_throttle_of_zero_names_the_flag(served_gateway: Served,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    status, err = cli(capsys, served_gateway, "sites", "throttle", "shop", "--rate", "0")
    assert status == 2 and "--rate must be more than 0" in err and "--off" in err
    assert "leases_per_second" not in err


def test_queries_list_and_show(served_gateway: Served, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = cli(capsys, served_gateway, "queries", "list", "--kind", "balance")
    assert status == 0
    assert out.splitlines()[0].split()[:3] == ["QUERY", "STATUS", "KIND"]
    assert "q-1" in out and out.splitlines()[-1] == "1-1 of 1 queries, newest first"
    status, out = cli(capsys, served_gateway, "queries", "list", "--json", "--site", "nowhere")
    assert status == 0 and json.loads(out)["items"] == []
    status, out = cli(capsys, served_gateway, "queries", "show", "q-1")
    assert status == 0 and "query_id" in out and "queued" in out
    status, out = cli(capsys, served_gateway, "queries", "show", "q-1", "--json")
    assert status == 0 and json.loads(out)["query_id"] == "q-1"


def test_queries_show_lists_each_attempts_error(served_gateway: Served,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    status, out = cli(capsys, served_gateway, "queries", "show", "q-retry")
    assert status == 0
    lines = out.splitlines()
    assert any(line.split() == ["max_attempts", "3"] for line in lines)
    assert any(line.split()[0] == "next_attempt_at" for line in lines)
    at = lines.index("attempts' errors (oldest first):")
    assert lines[at + 1].startswith("  #1  ")
    assert lines[at + 1].endswith("  desk-1  bank.Offline (code 503): bank offline")


def test_refusals_are_one_line_with_their_status(served_gateway: Served,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    status, err = cli(capsys, served_gateway, "tasks", "show", "nope")
    assert status == 1 and err.startswith("leasegate: 404 task_not_found: ")
    status, err = cli(capsys, served_gateway, "tasks", "list", "--since", "yesterday")
    assert status == 2 and err.startswith("leasegate: 400 invalid_request: since")
    assert err.count("\n") == 1
    assert main(["tasks", "list", "--url", served_gateway.url, "--key", "lg_x_y"]) == 1
    assert "401" in capsys.readouterr().err
    assert main(["tasks", "list", "--url", "http://127.0.0.1:9", "--key", "k"]) == 1
    assert "cannot reach the gateway at http://127.0.0.1:9" in capsys.readouterr().err


def test_keys_list_and_revoke_while_serving(served_gateway: Served,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    data = str(served_gateway.data)
    assert main(["keys", "create", "--role", "client", "--name", "doomed", "--tenant", "t9",
                 "--data", data]) == 0
    key = capsys.readouterr().out.splitlines()[-1]
    key_id = key.split("_")[1]
    assert main(["keys", "list", "--data", data]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["KEY", "ROLE", "NAME", "TENANT", "SITES", "CREATED", "REVOKED"]
    assert out[1].split()[:4] == [key_id, "client", "doomed", "t9"]  # newest first
    assert out[-1] == "4 keys, 4 live"
    assert main(["keys", "revoke", key_id, "--data", data]) == 0
    assert capsys.readouterr().out.startswith(f"revoked client key {key_id} (doomed)")
    assert main(["keys", "revoke", key_id, "--data", data, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revoked_at"] is not None
    assert main(["keys", "list", "--data", data, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["total"] == 4 and listed["items"][0]["key_id"] == key_id
    assert "secret_hash" not in listed["items"][0]
    # Never used, so never trusted from the gateway's cache: refused at once.
    refused = httpx.get(served_gateway.url + "/v1/tasks",
                        headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 401
    assert main(["keys", "revoke", "nope", "--data", data]) == 1
    assert capsys.readouterr().err == "leasegate: no key nope\n"


async def test_a_revocation_from_the_shell_reaches_a_running_gateway_within_its_cache_bound(
        gateway: Gateway, tmp_path: Path, autojump_clock: MockClock) -> None:
    """The conftest gateway's database is ``tmp_path/leasegate.db``: a data directory."""
    worker = gateway.keys["worker"]
    headers = {"Authorization": f"Bearer {worker}"}
    lease: Any = {"worker_id": "w1", "wait_seconds": 0}
    assert (await gateway.call("POST", "/v1/queries/lease", json=lease,
                               headers=headers))[0] == 200  # verified: trusted a while
    assert main(["keys", "revoke", worker.split("_")[1], "--data", str(tmp_path)]) == 0
    await trio.sleep(VERIFIED_SECONDS + 1)
    status, body = await gateway.call("POST", "/v1/queries/lease", json=lease, headers=headers)
    assert status == 401 and body["error"]["message"] == "this API key was revoked"


def test_a_revocation_from_the_shell_ends_the_keys_poll_on_a_running_gateway_within_a_second(
        served_gateway: Served, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI writes the database from another process; the gateway looks for new
    revocations every key_revocation_poll_interval (0.5 s)."""
    data = str(served_gateway.data)
    assert main(["keys", "create", "--role", "worker", "--name", "doomed-worker",
                 "--data", data]) == 0
    key = capsys.readouterr().out.splitlines()[-1]
    answered: list[tuple[float, httpx.Response]] = []

    def poll() -> None:  # a site of its own: no other test's work is taken
        reply = httpx.post(served_gateway.url + "/v1/tasks/lease", timeout=30, json={
            "worker_id": "w-doomed", "wait_seconds": 20, "sites": ["doomed-site"]},
            headers={"Authorization": f"Bearer {key}"})
        answered.append((time.monotonic(), reply))

    polling = threading.Thread(target=poll)
    polling.start()
    until_waiting(served_gateway, 1)
    assert main(["keys", "revoke", key.split("_")[1], "--data", data]) == 0
    revoked = time.monotonic()
    polling.join(10)
    [(at, reply)] = answered
    assert reply.status_code == 401 and reply.json()["error"]["message"] == (
        "this API key was revoked")
    assert reply.headers["WWW-Authenticate"].startswith("Bearer ")
    assert at - revoked < 1.0, at - revoked
    refused = httpx.get(served_gateway.url + "/v1/tasks",
                        headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 401


def until_waiting(served: Served, count: int, actor: str = "tasks") -> None:
    """Wait (10 s at most) until ``count`` requests are parked in ``actor``."""
    with served.client("admin") as admin:
        deadline = time.monotonic() + 10
        while f'leasegate_actor_waiting_polls{{actor="{actor}"}} {count}.0' not in admin.get(
                "/metrics").text:
            assert time.monotonic() < deadline, "never parked"
            time.sleep(0.02)


def test_backup_refuses_an_existing_file_unless_forced(
        served_gateway: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "copy.db"
    out.write_text("precious")
    assert main(["backup", "--out", str(out), "--data", str(served_gateway.data)]) == 1
    assert capsys.readouterr().err == f"leasegate: {out} exists; --force to overwrite it\n"
    assert out.read_text() == "precious"
    assert main(["backup", "--out", str(out), "--data", str(served_gateway.data), "--force"]) == 0
    assert out.read_bytes().startswith(b"SQLite format 3")


@pytest.mark.parametrize("data", ["var", "deep/er/var"])
def test_serve_on_a_busy_port_leaves_nothing_behind(tmp_path: Path, data: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = run_cli("serve", "--data", str(tmp_path / data), "--port", str(port))
    assert run.returncode == 1 and run.stderr == f"leasegate: port {port} is in use\n"
    assert list(tmp_path.iterdir()) == []
    # An existing data directory is left as it was (its lock file, which it had).
    (tmp_path / "kept").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        run = run_cli("serve", "--data", str(tmp_path / "kept"), "--port",
                      str(taken.getsockname()[1]))
    assert run.returncode == 1 and (tmp_path / "kept").is_dir()


def test_every_keys_create_in_the_readme_is_a_valid_command(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    """The README's examples and the command agree (a client key names its tenant)."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    text = " ".join(readme.split())  # examples may wrap in prose
    examples = re.findall(r"`(leasegate keys create [^`\[]*)", text)
    assert len(examples) >= 3, examples
    data = tmp_path / "var"
    served = start(data)
    stop(served)
    for example in examples:
        args = example.split()[1:]
        assert main([*args, "--data", str(data)]) == 0, (example, capsys.readouterr().err)
        assert capsys.readouterr().out.splitlines()[-1].startswith("lg_")
    assert main(["keys", "create", "--role", "client", "--name", "x", "--data", str(data)]) == 2
    assert "a client key needs a tenant" in capsys.readouterr().err
