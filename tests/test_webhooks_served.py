"""Webhooks from a real ``leasegate serve`` to a real HTTP server on 127.0.0.1 (wall
clock): a delivery verified with the ``standardwebhooks`` reference library, and a
``kill -9`` of the gateway between the results and their deliveries that loses none."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from leasegate.client import verify_webhook
from tests.served import Served, free_port, restart, start, stop

PATIENCE = 30.0  # seconds a served effect may take under load before the test fails
ENV = {"LEASEGATE_WEBHOOK_ALLOW_PRIVATE": "1", "LEASEGATE_WEBHOOK_RETRY_JITTER": "0"}


class Receiver:
    """A threading HTTP server on 127.0.0.1:``port`` that keeps every POST it gets
    (headers, body) and answers 204; :meth:`stop` closes it (then the port refuses)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.received: list[tuple[dict[str, str], bytes]] = []
        received = self.received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(free_port())
    yield found
    found.stop()


def wait_for(probe: Any, seconds: float = PATIENCE) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := probe()):
        assert time.monotonic() < deadline, f"not reached within {seconds} s"
        time.sleep(0.05)
    return value


def run_task(served: Served, task_id: str, outcome: str = "succeeded") -> None:
    with served.client("client") as client, served.client("worker") as worker:
        reply = client.post("/v1/tasks", json={"task_id": task_id, "site": "shop",
                                               "kind": "order", "params": {}})
        assert reply.status_code == 201, reply.text
        [lease] = worker.post("/v1/tasks/lease", json={
            "worker_id": "w1", "wait_seconds": 0, "sites": ["shop"]}).json()["items"]
        fence = {"worker_id": "w1", "lease_token": lease["lease_token"]}
        assert worker.post(f"/v1/tasks/{task_id}/start", json=fence).status_code == 200
        error = {"error": {"message": "no"}} if outcome == "failed" else {}
        done = worker.post(f"/v1/tasks/{task_id}/result",
                           json={**fence, "outcome": outcome, **error})
        assert done.status_code == 200, done.text


def create_endpoint(served: Served, url: str, events: list[str]) -> dict[str, Any]:
    with served.client("client") as client:
        reply = client.post("/v1/webhooks", json={"url": url, "events": events})
    assert reply.status_code == 201, reply.text
    return dict(reply.json())


def deliveries(served: Served, endpoint_id: str) -> list[dict[str, Any]]:
    with served.client("client") as client:
        reply = client.get(f"/v1/webhooks/{endpoint_id}/deliveries")
    assert reply.status_code == 200, reply.text
    return list(reply.json()["items"])


def test_a_webhook_reaches_a_real_server_and_verifies(tmp_path: Path,
                                                       receiver: Receiver) -> None:
    served = start(tmp_path / "var", ENV)
    try:
        endpoint = create_endpoint(served, receiver.url, ["task.succeeded"])
        run_task(served, "order-1")
        [(headers, body)] = wait_for(lambda: receiver.received)
        event = Webhook(endpoint["secret"]).verify(body, headers)
        assert event == verify_webhook(endpoint["secret"], headers, body)
        assert (event["type"], event["data"]["task_id"], event["data"]["status"]) == (
            "task.succeeded", "order-1", "succeeded")
        assert headers["content-type"] == "application/json"
        [delivery] = wait_for(lambda: [d for d in deliveries(served, endpoint["endpoint_id"])
                                       if d["status"] == "delivered"])
        assert (delivery["delivery_id"], delivery["attempts"], delivery["last_status_code"]
                ) == (headers["webhook-id"], 1, 204)
    finally:
        stop(served)


def test_a_kill_between_results_and_their_deliveries_loses_none(tmp_path: Path) -> None:
    port = free_port()  # the receiver is down: this port refuses connections
    served = start(tmp_path / "var", ENV)
    receiver: Receiver | None = None
    try:
        endpoint = create_endpoint(served, f"http://127.0.0.1:{port}/hooks",
                                   ["task.succeeded", "task.failed"])
        run_task(served, "order-1")
        run_task(served, "order-2", "failed")
        run_task(served, "order-3")
        # Each was tried once and refused; the retries are due 5 s later.
        wait_for(lambda: all(d["attempts"] >= 1 and d["status"] == "pending"
                             for d in deliveries(served, endpoint["endpoint_id"]))
                 and len(deliveries(served, endpoint["endpoint_id"])) == 3)
        served.process.kill()  # kill -9
        served.process.wait()
        served = restart(served)
        receiver = Receiver(port)
        received = wait_for(lambda: len(receiver.received) >= 3 and receiver.received)
        time.sleep(1.0)  # nothing more comes
        sent = sorted((json.loads(body)["type"], json.loads(body)["data"]["task_id"])
                      for _, body in received)
        assert sent == [("task.failed", "order-2"), ("task.succeeded", "order-1"),
                        ("task.succeeded", "order-3")]
        assert len({headers["webhook-id"] for headers, _ in received}) == 3
        for headers, body in received:
            Webhook(endpoint["secret"]).verify(body, headers)
        wait_for(lambda: all(d["status"] == "delivered"
                             for d in deliveries(served, endpoint["endpoint_id"])))
    finally:
        if receiver is not None:
            receiver.stop()
        if served.process.poll() is None:
            stop(served)


def test_an_unreachable_endpoint_is_recorded_as_refused(tmp_path: Path) -> None:
    served = start(tmp_path / "var", ENV)
    try:
        endpoint = create_endpoint(served, f"http://127.0.0.1:{free_port()}/hooks",
                                   ["task.succeeded"])
        run_task(served, "order-1")
        [delivery] = wait_for(lambda: [d for d in deliveries(served, endpoint["endpoint_id"])
                                       if d["attempts"] >= 1])
        assert delivery["status"] == "pending"
        assert "ConnectError" in delivery["last_error"]
        assert httpx.get(f"{served.url}/health").json()["status"] in ("ok", "degraded")
    finally:
        stop(served)


def test_the_cli_creates_lists_shows_deliveries_retries_and_deletes(
        tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    from leasegate.cli import main

    served = start(tmp_path / "var", ENV)

    def cli(*args: str, status: int = 0) -> str:
        code = main(["webhooks", *args, "--url", served.url, "--key", served.keys["admin"]])
        out, err = capsys.readouterr()
        assert code == status, (out, err)
        return out if status == 0 else err

    try:
        out = cli("create", receiver.url, "--events", "task.succeeded,task.failed",
                  "--tenant", "default", "--description", "orders")
        secret = out.split("secret (shown once): ")[1].strip()
        assert secret.startswith("whsec_")
        [endpoint] = json.loads(cli("list", "--json"))["items"]
        assert (endpoint["tenant"], endpoint["events"]) == (
            "default", ["task.succeeded", "task.failed"])
        assert endpoint["endpoint_id"] in cli("list")
        run_task(served, "order-1")
        wait_for(lambda: receiver.received)
        Webhook(secret).verify(receiver.received[0][1], receiver.received[0][0])
        [delivery] = wait_for(lambda: [
            d for d in json.loads(cli("deliveries", endpoint["endpoint_id"], "--json"))["items"]
            if d["status"] == "delivered"])
        assert "delivered" in cli("deliveries", endpoint["endpoint_id"])
        cli("retry", endpoint["endpoint_id"], delivery["delivery_id"])
        wait_for(lambda: len(receiver.received) == 2)
        assert receiver.received[1][1] == receiver.received[0][1]  # the same body again
        assert "not_found" in cli("retry", endpoint["endpoint_id"], "msg_nope", status=1)
        assert cli("delete", endpoint["endpoint_id"]).startswith("deleted")
        assert json.loads(cli("list", "--json"))["items"] == []
        assert "invalid_request" in cli("create", receiver.url, "--events", "task.nope",
                                        "--tenant", "default", status=1)
    finally:
        stop(served)
