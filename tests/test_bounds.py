"""Against the served gateway: what one caller may hold open. Parked long-polls per
key and per address (429 with ``Retry-After`` past them, a closed poll frees its
place), connections per address (closed at accept past it), and a process out of
file descriptors that says so in one line and serves again."""

from __future__ import annotations

import json
import re
import resource
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import httpx
import pytest

from leasegate.http.server.listener import ConnectionGate
from tests import served as served_module
from tests.served import Served, start, stop

PER_KEY, PER_ADDRESS, CONNECTIONS_PER_ADDRESS = 5, 8, 12


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    gateway = start(tmp_path_factory.mktemp("bounds") / "var", {
        "LEASEGATE_MAX_PARKED_PER_KEY": str(PER_KEY),
        "LEASEGATE_MAX_PARKED_PER_ADDRESS": str(PER_ADDRESS),
        "LEASEGATE_MAX_CONNECTIONS_PER_ADDRESS": str(CONNECTIONS_PER_ADDRESS)},
        collect_output=True)
    yield gateway
    stop(gateway)


@pytest.fixture(scope="module")
def query_id(served: Served) -> str:
    """A query nobody leases: a GET of it with wait_seconds parks."""
    with served.client("client") as client:
        return str(client.post("/v1/queries", json={"site": "nobody", "kind": "k",
                                                    "params": {}}).json()["query_id"])


def send(served: Served, source: str, method: str, path: str, role: str,
         body: dict[str, object] | None = None) -> socket.socket:
    """A raw request from ``source`` (a loopback address) on a connection of its own."""
    sock = socket.socket()
    sock.settimeout(5)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", served.port))
    data = json.dumps(body).encode() if body is not None else b""
    sock.sendall((f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                  f"Authorization: Bearer {served.keys[role]}\r\n"
                  + ("Content-Type: application/json\r\n" if body is not None else "")
                  + f"Content-Length: {len(data)}\r\n\r\n").encode() + data)
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the answer on ``sock`` (read until it closes or
    the whole body is in)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, f"closed without an answer: {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        body += sock.recv(65536)
    return int(status_line.split()[1]), headers, body


def waiting_polls(served: Served) -> int:
    with served.client("admin") as admin:
        text = admin.get("/metrics").text
    found = re.search(r"^leasegate_http_held_polls (\S+)$", text, re.MULTILINE)
    assert found, text
    return int(float(found.group(1)))


def wait_for_waiting(served: Served, n: int) -> None:
    deadline = time.monotonic() + 10
    while waiting_polls(served) != n:
        assert time.monotonic() < deadline, f"{waiting_polls(served)} parked, not {n}"
        time.sleep(0.05)


@contextmanager
def held(*sockets: socket.socket) -> Iterator[list[socket.socket]]:
    with ExitStack() as stack:
        for sock in sockets:
            stack.enter_context(sock)
        yield list(sockets)


def assert_refused(status: int, headers: dict[str, str], body: bytes, whose: str) -> None:
    assert status == 429, body
    assert json.loads(body)["error"]["code"] == 4290 and whose in json.loads(body)["error"][
        "message"]
    assert 1 <= int(headers["retry-after"]) <= 30  # the oldest poll's end, at the latest
    assert headers["connection"] == "close"


def test_past_its_bound_a_key_gets_429_and_a_closed_poll_frees_its_place(
        served: Served, query_id: str) -> None:
    poll = f"/v1/queries/{query_id}?wait_seconds=30"
    stream = send(served, "127.0.0.1", "GET", "/v1/events", "client")
    with held(stream, *(send(served, "127.0.0.1", "GET", poll, "client")
                        for _ in range(PER_KEY - 1))) as polls:
        assert answer(stream)[0] == 200  # the event stream counts: it is parked too
        wait_for_waiting(served, PER_KEY)
        for path in (poll, "/v1/events", "/v1/tasks/nosuch?wait_seconds=5"):
            with send(served, "127.0.0.2", "GET", path, "client") as extra:
                assert_refused(*answer(extra), "this key")
        with served.client("client") as client:  # no wait: nothing parked, no bound
            assert client.get(f"/v1/queries/{query_id}").status_code == 200
        polls[1].close()
        wait_for_waiting(served, PER_KEY - 1)
        with send(served, "127.0.0.2", "GET", f"/v1/queries/{query_id}?wait_seconds=1",
                  "client") as admitted:
            assert answer(admitted)[0] == 200  # parked for its second, then answered
    wait_for_waiting(served, 0)


def test_past_its_bound_an_address_gets_429_whatever_the_key(served: Served,
                                                              query_id: str) -> None:
    lease = {"worker_id": "w", "wait_seconds": 30, "sites": ["elsewhere"]}
    with held(*(send(served, "127.0.0.3", "GET", f"/v1/queries/{query_id}?wait_seconds=30",
                     "client") for _ in range(PER_KEY)),
              *(send(served, "127.0.0.3", "POST", "/v1/tasks/lease", "worker", lease)
                for _ in range(PER_ADDRESS - PER_KEY))):
        wait_for_waiting(served, PER_ADDRESS)
        with send(served, "127.0.0.3", "POST", "/v1/queries/lease", "worker", lease) as extra:
            assert_refused(*answer(extra), "this address")
        with send(served, "127.0.0.4", "POST", "/v1/queries/lease", "worker",
                  {**lease, "wait_seconds": 1}) as elsewhere:
            status, _, body = answer(elsewhere)  # another address: parked, then empty
            assert status == 200 and json.loads(body) == {"items": []}
    wait_for_waiting(served, 0)


def test_past_its_bound_an_address_has_its_connections_closed_at_once(
        served: Served) -> None:
    with ExitStack() as stack:
        for _ in range(CONNECTIONS_PER_ADDRESS):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.5", 0))
            sock.connect(("127.0.0.1", served.port))
        # Accepted after those (the backlog is first in, first out): one too many.
        with socket.socket() as refused:
            refused.settimeout(5)
            refused.bind(("127.0.0.5", 0))
            refused.connect(("127.0.0.1", served.port))
            assert refused.recv(100) == b""  # closed at once, not a byte sent
        with served.client("admin") as admin:  # another address is served
            text = admin.get("/metrics").text
            assert 'leasegate_http_connections_refused_total{bound="address"} 1.0' in text
    assert not [line for line in served.output if "Traceback" in line]


def test_out_of_file_descriptors_is_one_line_and_serving_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process allowed 64 descriptors, told it may hold 1000 connections: accept
    fails with EMFILE again and again while 100 parked polls wait, and says so once.
    (Polls, not idle connections: hypercorn keeps an idle connection its client closed
    until keep_alive_timeout, a poll's close is seen at once.)"""
    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    monkeypatch.setattr(subprocess, "Popen",  # served.start's
                        partial(subprocess.Popen, preexec_fn=limit_descriptors))
    gateway = served_module.start(tmp_path / "var", {"LEASEGATE_MAX_CONNECTIONS": "1000"},
                                  collect_output=True)
    try:
        with gateway.client("client") as client:
            query = client.post("/v1/queries", json={"site": "s", "kind": "k", "params": {}})
        poll = f"/v1/queries/{query.json()['query_id']}?wait_seconds=30"
        with ExitStack() as stack:
            for _ in range(100):  # past the limit: the rest wait in the backlog
                stack.enter_context(send(gateway, "127.0.0.1", "GET", poll, "client"))
            time.sleep(1.0)  # ten pauses of accept's, each an EMFILE
        with httpx.Client(base_url=gateway.url, timeout=10) as client:
            deadline = time.monotonic() + 10
            while True:  # the waiting connections were closed: it accepts again
                try:
                    assert client.get("/health").status_code == 200
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
    finally:
        assert stop(gateway) == 0
    output = "".join(gateway.output)
    assert "Traceback" not in output and "ERROR" not in output, output
    emfile = [line for line in gateway.output if "EMFILE" in line]
    assert len(emfile) == 1 and "accept failed: EMFILE" in emfile[0], output


# ---- the gate itself, in one process -----------------------------------------------------

def test_the_gate_bounds_connections_in_all_and_per_address() -> None:
    gate = ConnectionGate(total=3, per_address=2)
    assert gate.admit("10.0.0.1") and gate.admit("10.0.0.1")
    assert not gate.admit("10.0.0.1")  # its address's bound
    assert gate.admit("10.0.0.2")
    assert not gate.admit("10.0.0.3")  # the bound in all
    gate.release("10.0.0.1")
    assert gate.admit("10.0.0.3")
    assert gate.refused == {"address": 1, "total": 1} and gate.open == 3
