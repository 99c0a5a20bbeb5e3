"""Against the served gateway, callers that try to make it work for nothing: artifact
bodies for tasks they hold no lease of, ``Expect: 100-continue`` with the wrong key,
pipelined requests on connections they then reset."""

from __future__ import annotations

import os
import re
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from leasegate.http.server.expect import MAX_QUEUED
from leasegate.http.server.listener import ClientStream
from tests.served import Served, start, stop

MiB = 1024 * 1024
PROMPT = 2.0  # seconds: what "at once" may take on a loaded machine
UPLOAD = 8 * MiB  # what the uploads here announce; a part of it is sent
PER_KEY, TOTAL = 2, 3  # the served gateway's max_uploads_per_key and max_uploads


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start(tmp_path_factory.mktemp("hostile") / "data",
                   {"LEASEGATE_MAX_UPLOADS_PER_KEY": str(PER_KEY),
                    "LEASEGATE_MAX_UPLOADS": str(TOTAL),
                    # Uploads held open, and the lease, must outlast the tests on a
                    # loaded machine.
                    "LEASEGATE_HTTP_BODY_TIMEOUT": "50", "LEASEGATE_TASK_LEASE_TTL": "900"},
                   collect_output=True, log_level="INFO")
    yield served
    stop(served)


@pytest.fixture(scope="module")
def lease(served: Served) -> tuple[str, str]:
    """A task leased and started by worker ``w``: (task id, lease token)."""
    with served.client("client") as upstream, served.client("worker") as worker:
        task_id = upstream.post("/v1/tasks", json={"site": "shop", "kind": "export",
                                                   "params": {}}).json()["task_id"]
        leased = worker.post("/v1/tasks/lease", json={"worker_id": "w", "wait_seconds": 2})
        item = leased.json()["items"][0]
        assert item["task_id"] == task_id
        token = item["lease_token"]
        started = worker.post(f"/v1/tasks/{task_id}/start",
                              json={"worker_id": "w", "lease_token": token})
        assert started.status_code == 200, started.text
    return task_id, token


def connect(served: Served) -> socket.socket:
    return socket.create_connection(("127.0.0.1", served.port), timeout=PROMPT)


def reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a caller that walks away does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def until(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` for up to ``seconds``: whether it came true."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def errors_logged(served: Served, since: int) -> list[str]:
    time.sleep(0.2)  # the server's output reaches served.output through a thread
    return [line for line in served.output[since:]
            if " ERROR " in line or "Traceback" in line or "Error in ASGI" in line]


# ---- artifact uploads: checked before the body, bounded -----------------------------


def upload_head(key: str, task_id: str, token: str, *, expect: bool = False,
                length: int = UPLOAD) -> bytes:
    return (f"PUT /v1/tasks/{task_id}/artifacts/x.bin HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {key}\r\nX-Worker-Id: w\r\nX-Lease-Token: {token}\r\n"
            f"Content-Length: {length}\r\n" + ("Expect: 100-continue\r\n" if expect else "")
            + "\r\n").encode()


def answer_head(sock: socket.socket) -> bytes:
    """The bytes the server sent first (the head of its first answer, at least)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {received!r}"
        received += chunk
    return received


def answer(sock: socket.socket) -> bytes:
    """The server's first final answer, head and body (of its Content-Length)."""
    received = answer_head(sock)
    while received.startswith(b"HTTP/1.1 100 "):
        received = received.split(b"\r\n\r\n", 1)[1] or answer_head(sock)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
    while len(body) < length:
        body += sock.recv(65536)
    return received[:len(head) + 4] + body


def staged(served: Served) -> list[str]:
    """What the staging area of the artifact store holds."""
    staging = served.data / "artifacts" / ".staging"
    return sorted(os.listdir(staging)) if staging.is_dir() else []


@pytest.mark.parametrize("target", ["no task", "wrong token"])
def test_an_upload_without_the_lease_is_refused_before_its_body(
        served: Served, lease: tuple[str, str], target: str) -> None:
    """The refusal comes while most of the announced body is still unsent, and not a
    byte of it reaches the disk."""
    task_id, token = lease
    task_id, token, status, code = (("no-such-task", token, 404, b'"code":6001')
                                    if target == "no task" else
                                    (task_id, "bogus", 409, b'"code":6002'))
    with connect(served) as sock:
        sock.sendall(upload_head(served.keys["worker"], task_id, token) + b"x" * 65536)
        received = answer(sock)
        assert received.startswith(f"HTTP/1.1 {status} ".encode()), received
        assert code in received
        assert staged(served) == []


def hold_upload(served: Served, key: str, lease: tuple[str, str],
                holders: list[socket.socket]) -> None:
    """An upload under the lease, its body begun and left waiting: it holds its place
    (once it stages, it has one); added to ``holders``."""
    sock = connect(served)
    holders.append(sock)
    sock.sendall(upload_head(key, *lease) + b"x" * 1024)
    assert until(lambda: len(staged(served)) == len(holders), 10)


def test_concurrent_uploads_are_bounded_per_key_and_in_all(served: Served,
                                                            lease: tuple[str, str]) -> None:
    with served.client("admin") as admin:
        other = admin.post("/v1/admin/keys", json={"role": "worker", "name": "w2"})
        assert other.status_code == 201, other.text
    keys = [served.keys["worker"], other.json()["key"]]
    holders: list[socket.socket] = []
    try:
        for _ in range(PER_KEY):
            hold_upload(served, keys[0], lease, holders)
        with httpx.Client(base_url=served.url, timeout=PROMPT) as http:
            def put(key: str) -> httpx.Response:
                return http.put(f"/v1/tasks/{lease[0]}/artifacts/y.bin", content=b"y" * 100,
                                headers={"Authorization": f"Bearer {key}", "X-Worker-Id": "w",
                                         "X-Lease-Token": lease[1]})

            refused = put(keys[0])
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == 4290
            assert "max_uploads_per_key" in refused.json()["error"]["message"]
            assert int(refused.headers["Retry-After"]) >= 1
            for _ in range(TOTAL - PER_KEY):
                hold_upload(served, keys[1], lease, holders)
            refused = put(keys[1])  # this key holds fewer, the gateway is full
            assert refused.status_code == 429 and "max_uploads" in refused.text
            assert len(staged(served)) == TOTAL  # the refused ones staged nothing
            for sock in holders:
                sock.close()
            holders = []
            # The places are given back when the uploads end.
            assert until(lambda: put(keys[0]).status_code == 201, 10)
    finally:
        for sock in holders:
            sock.close()
    assert until(lambda: staged(served) == [], 10)


# ---- Expect: 100-continue only after the checks -------------------------------------


def expecting_continue(key: str, body: bytes) -> bytes:
    """A query submitted with ``Expect: 100-continue``: the head, body held back."""
    return (f"POST /v1/queries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nExpect: 100-continue\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()


QUERY = b'{"site": "shop", "kind": "k", "params": {}}'


@pytest.mark.parametrize(("key", "status"), [("unknown", 401), ("worker", 403)])
def test_expect_continue_with_a_wrong_key_gets_no_100(served: Served, key: str,
                                                       status: int) -> None:
    """The refusal, without a 100 before it: the body is never sent."""
    with connect(served) as sock:
        sock.sendall(expecting_continue(served.keys.get(key, "lg_nosuchkey_secret"),
                                        QUERY))
        head = answer_head(sock)
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
    assert b"connection: close" in head.lower()  # the body it held back never comes


def test_expect_continue_on_no_route_gets_no_100(served: Served) -> None:
    with connect(served) as sock:
        sock.sendall(expecting_continue(served.keys["client"], QUERY).replace(
            b"/v1/queries", b"/v1/nowhere"))
        head = answer_head(sock)
    assert head.startswith(b"HTTP/1.1 404 ") and b"connection: close" in head.lower()


def test_expect_continue_with_a_good_key_gets_its_100(served: Served) -> None:
    with connect(served) as sock:
        sock.sendall(expecting_continue(served.keys["client"], QUERY))
        assert answer_head(sock).startswith(b"HTTP/1.1 100 ")
        sock.sendall(QUERY)
        assert answer_head(sock).startswith(b"HTTP/1.1 201 ")


@pytest.mark.parametrize(("case", "status"), [("no task", 404), ("wrong token", 409)])
def test_expect_continue_on_an_upload_without_the_lease_gets_no_100(
        served: Served, lease: tuple[str, str], case: str, status: int) -> None:
    task_id, token = lease
    task_id = "no-such-task" if case == "no task" else task_id
    token = "bogus" if case == "wrong token" else token
    with connect(served) as sock:
        sock.sendall(upload_head(served.keys["worker"], task_id, token, expect=True))
        head = answer_head(sock)
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head  # and no 100 before it
    assert b"connection: close" in head.lower()
    assert staged(served) == []


def test_expect_continue_on_an_upload_under_the_lease_gets_its_100_then_201(
        served: Served, lease: tuple[str, str]) -> None:
    with connect(served) as sock:
        sock.sendall(upload_head(served.keys["worker"], *lease, expect=True, length=5))
        assert answer_head(sock).startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"hello")
        assert answer(sock).startswith(b"HTTP/1.1 201 ")


# ---- pipelined requests on connections that are reset -------------------------------


class Scrape:
    """The served gateway's own signals: its /metrics (on one kept connection, counted
    in the baseline) and its open descriptors."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.http = httpx.Client(base_url=served.url, timeout=10, headers={
            "Authorization": f"Bearer {served.keys['admin']}"})
        self.value("leasegate_http_held_polls")  # the connection is open from here on

    def value(self, name: str, route: str | None = None) -> int:
        """The sum of the samples called ``name`` (of ``route``, when given)."""
        text = self.http.get("/metrics").text
        return int(sum(sample.value for family in text_string_to_metric_families(text)
                       for sample in family.samples if sample.name == name
                       and (route is None or sample.labels.get("route") == route)))

    def served_count(self, route: str) -> int:
        """Requests of ``route`` answered."""
        return self.value("leasegate_http_requests_total", route)

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.served.process.pid}/fd"))


@pytest.fixture
def scrape(served: Served) -> Iterator[Scrape]:
    scrape = Scrape(served)
    yield scrape
    scrape.http.close()


def pipeline(served: Served, request: bytes, times: int) -> socket.socket:
    """A connection with ``request`` sent ``times`` over without reading an answer."""
    sock = connect(served)
    sock.setblocking(False)
    data = request * times
    deadline = time.monotonic() + PROMPT
    while data and time.monotonic() < deadline:  # as much as the server takes
        try:
            data = data[sock.send(data):]
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            break  # closed by the server: it takes no more
    sock.setblocking(True)
    return sock


def answers(sock: socket.socket) -> list[bytes]:
    """The heads of the answers on ``sock`` until the server closes it."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return re.findall(rb"HTTP/1\.1 \d+ .*?\r\n\r\n", received, re.S)


def list_request(served: Served, limit: int) -> bytes:
    return (f"GET /v1/tasks?limit={limit} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {served.keys['admin']}\r\n\r\n").encode()


def test_a_connection_answers_a_few_pipelined_requests_then_closes(served: Served) -> None:
    with pipeline(served, list_request(served, 1), 50) as sock:
        heads = answers(sock)
    assert len(heads) == 1 + MAX_QUEUED
    assert all(head.startswith(b"HTTP/1.1 200 ") for head in heads)
    assert b"connection: close" in heads[-1].lower()
    assert not any(b"connection: close" in head.lower() for head in heads[:-1])


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_pipelined_requests_on_reset_connections_stop_and_free_their_fds(
        served: Served, scrape: Scrape) -> None:
    """20 connections, each with 2,000 ``GET /v1/tasks?limit=500`` pipelined and never
    read, then reset once the server answers on each: each answers at most MAX_QUEUED
    behind the first, every descriptor is back at once, and nothing is logged at
    ERROR (a connection closing during an answer)."""
    logged = len(served.output)
    before, fds = scrape.served_count("/v1/tasks"), scrape.open_fds()
    connections = [pipeline(served, list_request(served, 500), 2000) for _ in range(20)]
    for sock in connections:
        assert sock.recv(1)  # the server is at work on it
        reset(sock)
    assert until(lambda: scrape.open_fds() <= fds, 5), (scrape.open_fds(), fds)
    assert scrape.served_count("/v1/tasks") - before <= 20 * (1 + MAX_QUEUED)
    assert errors_logged(served, logged) == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_requests_queued_on_a_connection_that_is_gone_are_dropped(
        served: Served, lease: tuple[str, str], scrape: Scrape) -> None:
    """A few long-polls pipelined (within the bound) on each connection, then a reset
    while the first waits: it finds the client gone when it answers, and the others
    never start (each would hold the connection a wait more)."""
    wait, route = 3, "/v1/tasks/<task_id>"
    logged = len(served.output)
    before, fds = scrape.served_count(route), scrape.open_fds()
    request = (f"GET /v1/tasks/{lease[0]}?wait_seconds={wait} HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: Bearer {served.keys['admin']}\r\n\r\n").encode()
    connections = [pipeline(served, request, MAX_QUEUED) for _ in range(5)]
    assert until(lambda: scrape.value("leasegate_http_held_polls") >= 5, 10)
    for sock in connections:
        reset(sock)
    assert until(lambda: scrape.open_fds() <= fds, wait + 3), (scrape.open_fds(), fds)
    assert scrape.served_count(route) - before <= 5  # one each: the one in flight
    assert errors_logged(served, logged) == []


async def test_an_answer_meeting_hypercorns_close_is_a_send_on_a_closed_stream() -> None:
    """hypercorn's close sends EOF outside its send lock: an answer written while the
    EOF is under way met trio's BusyResourceError, which nothing above expects (it was
    logged at ERROR as an error of the app); through ClientStream it is a send on a
    closed stream, which hypercorn takes as the client gone. (Which of the two goes
    first is trio's scheduling: tried until the answer comes second.)"""
    clashes = 0
    for _ in range(100):
        ours, theirs = trio.socket.socketpair()
        with theirs, trio.CancelScope() as connection:
            stream = ClientStream(trio.SocketStream(ours), connection)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream.send_eof)  # hypercorn's close
                await trio.lowlevel.checkpoint()
                try:
                    await stream.send_all(b"the answer")
                except trio.ClosedResourceError:
                    clashes += 1
            await stream.aclose()
        assert not connection.cancelled_caught  # closing is not the client gone
        if clashes:
            return
    raise AssertionError("the answer never came while the EOF was under way")


async def test_a_client_gone_ends_its_connection() -> None:
    """A reset found by a send, or the client's end of the stream found by a read,
    cancels the scope the connection runs in (with whatever it had queued)."""
    for gone in ("reset", "eof"):
        ours, theirs = trio.socket.socketpair()
        with trio.CancelScope() as connection:
            stream = ClientStream(trio.SocketStream(ours), connection)
            if gone == "reset":
                theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                theirs.close()
                with pytest.raises(trio.BrokenResourceError):
                    await stream.send_all(b"x" * 1_000_000)
            else:
                theirs.shutdown(socket.SHUT_WR)
                assert await stream.receive_some() == b""
                theirs.close()
            await trio.sleep_forever()  # the queued requests: never reached
        assert connection.cancelled_caught, gone
        await stream.aclose()
