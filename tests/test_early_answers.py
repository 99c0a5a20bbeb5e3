"""Against the served gateway: an answer given before the request body was read
leaves the keep-alive connection usable (or closed, and said so), and the next
request on the same client gets its answer at once."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from leasegate import client as sdk
from leasegate.http.server.body_guard import DRAIN_SECONDS
from tests.served import Served, start, stop

KiB, MiB = 1024, 1024 * 1024
ARTIFACT_LIMIT = 3 * MiB
MAX_BODY = MiB
SIZES = {"1B": 1, "100KiB": 100 * KiB, "2MiB": 2 * MiB, "over-artifact-limit": ARTIFACT_LIMIT + 1}
PROMPT = 2.0  # seconds: no answer may take longer (a stall was read_timeout, 60 s)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Served]]:
    """One gateway for everything, and one whose keys have a single token (for 429s)."""
    base = tmp_path_factory.mktemp("early")
    plain = {"LEASEGATE_MAX_ARTIFACT_BYTES": str(ARTIFACT_LIMIT),
             "LEASEGATE_HTTP_BODY_TIMEOUT": "1"}
    limited = {"LEASEGATE_RATE_LIMIT_PER_SECOND": "0.001", "LEASEGATE_RATE_LIMIT_BURST": "1"}
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda a: start(*a, collect_output=True),
                             [(base / "plain", plain), (base / "limited", limited)]))
    yield both[0], both[1]
    for served in both:
        stop(served)


@pytest.fixture(scope="module")
def served(servers: tuple[Served, Served]) -> Served:
    return servers[0]


@pytest.fixture(scope="module")
def leased_task(served: Served) -> str:
    """A task leased by worker ``w``, whose artifact uploads need its lease token."""
    with served.client("client") as upstream, served.client("worker") as worker:
        task_id = upstream.post("/v1/tasks", json={"site": "shop", "kind": "export",
                                                   "params": {}}).json()["task_id"]
        lease = worker.post("/v1/tasks/lease", json={"worker_id": "w", "wait_seconds": 2})
        assert lease.json()["items"][0]["task_id"] == task_id
    return str(task_id)


def auth(served: Served, role: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {served.keys[role]}"} if role else {}


def over(limit: int, size: int, small: int, big: int = 413) -> int:
    return big if size > limit else small


# name -> (method, path, role, headers, expected status for a body of n bytes)
Case = tuple[str, str, str | None, dict[str, str], Callable[[int], int]]
CASES: dict[str, Case] = {
    "400 bad JSON": ("POST", "/v1/queries", "client", {"Content-Type": "application/json"},
                     lambda n: over(MAX_BODY, n, 400)),
    "400 bad id": ("POST", "/v1/tasks/a%20b/result", "worker", {}, lambda n: 400),
    "401": ("POST", "/v1/queries", None, {}, lambda n: 401),
    "403": ("POST", "/v1/queries", "worker", {}, lambda n: 403),
    "404 path": ("POST", "/v1/nowhere", "client", {}, lambda n: 404),
    "404 task": ("PUT", "/v1/tasks/nosuchtask/artifacts/a.bin", "worker",
                 {"X-Worker-Id": "w", "X-Lease-Token": "t"},
                 lambda n: over(ARTIFACT_LIMIT, n, 404)),
    "405": ("PUT", "/v1/queries", "client", {}, lambda n: 405),
    "409": ("PUT", "/v1/tasks/{task}/artifacts/a.bin", "worker",
            {"X-Worker-Id": "w", "X-Lease-Token": "wrong"}, lambda n: over(ARTIFACT_LIMIT, n, 409)),
}


def chunks(size: int) -> Iterator[bytes]:
    while size > 0:
        yield b"x" * min(size, 64 * KiB)
        size -= 64 * KiB


def assert_next_request_is_prompt(http: httpx.Client, served: Served) -> None:
    began = time.monotonic()
    reply = http.get("/v1/queries", params={"limit": 1}, headers=auth(served, "client"))
    assert reply.status_code == 200, reply.text
    assert time.monotonic() - began < PROMPT


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("case", CASES.keys())
def test_an_early_answer_leaves_the_connection_usable(served: Served, leased_task: str,
                                                      case: str, size: int) -> None:
    method, path, role, headers, expected = CASES[case]
    with httpx.Client(base_url=served.url, timeout=PROMPT) as http:
        reply = http.request(method, path.format(task=leased_task), content=b"x" * size,
                             headers={**auth(served, role), **headers})
        assert reply.status_code == expected(size), reply.text
        assert set(reply.json()["error"]) == {"code", "type", "message"}  # the envelope
        # Drained, not closed: the connection is kept for the next request.
        assert reply.headers.get("Connection") != "close"
        assert_next_request_is_prompt(http, served)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_a_chunked_body_too_large_is_413_and_the_connection_usable(served: Served,
                                                                   size: int) -> None:
    with httpx.Client(base_url=served.url, timeout=PROMPT) as http:
        reply = http.post("/v1/queries", content=chunks(size),
                          headers={**auth(served, "client"), "Content-Type": "application/json"})
        assert reply.status_code == over(MAX_BODY, size, 400), reply.text
        assert_next_request_is_prompt(http, served)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_429_leaves_the_connection_usable(servers: tuple[Served, Served], size: int) -> None:
    limited = servers[1]
    with httpx.Client(base_url=limited.url, timeout=PROMPT) as http:
        http.get("/v1/queries", headers=auth(limited, "client"))  # the one token, if left
        reply = http.post("/v1/queries", content=b"x" * size,
                          headers={**auth(limited, "client"), "Content-Type": "application/json"})
        assert reply.status_code == 429 and int(reply.headers["Retry-After"]) >= 1
        assert http.get("/health").status_code == 200  # needs no key: not limited


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_past_the_drain_bound_is_answered_with_connection_close(
        served: Served, chunked: bool) -> None:
    size = 20 * MiB  # the guard reads and drops at most max(16 MiB, artifact limit)
    with httpx.Client(base_url=served.url, timeout=PROMPT) as http:
        content = chunks(size) if chunked else b"x" * size
        reply = http.post("/v1/queries", content=content)
        assert reply.status_code == 401 and reply.headers["Connection"] == "close"
        assert_next_request_is_prompt(http, served)  # on a new connection


def raw_exchange(served: Served, head: str, body: bytes = b"", *, wait: float = 3) -> bytes:
    """Send a request by hand and read until the server closes the connection."""
    port = int(served.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@pytest.mark.parametrize(("method", "path", "length"), [
    ("POST", "/v1/queries", MAX_BODY + 1),
    ("PUT", "/v1/tasks/{task}/artifacts/a.bin", ARTIFACT_LIMIT + 1),
])
def test_expect_continue_with_a_body_over_the_limit_is_413_without_a_100(
        served: Served, leased_task: str, method: str, path: str, length: int) -> None:
    began = time.monotonic()
    received = raw_exchange(served, (
        f"{method} {path.format(task=leased_task)} HTTP/1.1\nHost: x\n"
        f"Authorization: Bearer {served.keys['worker' if method == 'PUT' else 'client']}\n"
        "Content-Type: application/json\nX-Worker-Id: w\nX-Lease-Token: t\n"
        f"Content-Length: {length}\nExpect: 100-continue\n"))
    assert time.monotonic() - began < PROMPT
    assert received.startswith(b"HTTP/1.1 413 "), received
    assert b" 100 " not in received.split(b"\r\n")[0]
    assert b"connection: close" in received.lower()


def test_a_body_announced_and_never_sent_gets_its_answer_at_once(served: Served) -> None:
    """An unknown key and ``Content-Length: 10000000`` (within what the guard drains),
    then no body: the 401 comes at once, not after the drain; the connection closes
    when the drain gives up, and nothing goes wrong in the server."""
    logged = len(served.output)
    with socket.create_connection(("127.0.0.1", served.port), timeout=PROMPT) as sock:
        began = time.monotonic()
        sock.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer lg_nosuchkey_secret\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n")
        received = sock.recv(65536)
        while b'"code":4010' not in received and time.monotonic() - began < PROMPT:
            received += sock.recv(65536)  # the head and the body may come apart
        assert time.monotonic() - began < PROMPT
        assert received.startswith(b"HTTP/1.1 401 "), received
        assert b'"code":4010' in received
        sock.settimeout(DRAIN_SECONDS + PROMPT)
        while sock.recv(65536):  # until the server closes it: the body never came
            pass
    time.sleep(0.2)  # the server's output reaches served.output through a thread
    assert not [line for line in served.output[logged:]
                if "Error" in line or "Traceback" in line], served.output[logged:]


def test_expect_continue_within_the_limit_still_gets_its_100(served: Served) -> None:
    body = b'{"site": "shop", "kind": "k", "params": {}}'
    port = int(served.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        sock.sendall((f"POST /v1/queries HTTP/1.1\r\nHost: x\r\n"
                      f"Authorization: Bearer {served.keys['client']}\r\n"
                      "Content-Type: application/json\r\nExpect: 100-continue\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n").encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 100 ")
        sock.sendall(body)
        assert sock.recv(100).startswith(b"HTTP/1.1 201 ")


def test_a_body_that_arrives_too_slowly_is_408(served: Served) -> None:
    began = time.monotonic()
    received = raw_exchange(served, (
        f"POST /v1/queries HTTP/1.1\nHost: x\nAuthorization: Bearer {served.keys['client']}\n"
        "Content-Type: application/json\nContent-Length: 100\n"), b'{"site": ')
    assert received.startswith(b"HTTP/1.1 408 "), received
    assert b'"code":4080' in received and b"connection: close" in received.lower()
    assert 1 <= time.monotonic() - began < 1 + PROMPT  # LEASEGATE_HTTP_BODY_TIMEOUT=1


def test_the_sdk_gets_through_early_answers_without_retrying(served: Served) -> None:
    once = sdk.Retry(attempts=1)
    big = {"x": "a" * (2 * MiB)}
    with sdk.Client(served.url, served.keys["client"], timeout=PROMPT, retry=once) as upstream, \
            sdk.Client(served.url, served.keys["admin"], timeout=PROMPT, retry=once) as admin:
        for _ in range(3):
            with pytest.raises(sdk.PayloadTooLarge):
                upstream.submit_query("shop", "balance", big)
            assert upstream.list_queries(limit=1)["total"] >= 0
            with pytest.raises(sdk.Forbidden):  # only a client key submits
                admin.submit_query("shop", "balance", big)
            assert admin.list_queries(limit=1)["total"] >= 0


def test_options_on_a_lease_path_is_not_the_task_route(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=PROMPT) as http:
        for path in ("/v1/tasks/lease", "/v1/queries/lease"):
            for method in ("OPTIONS", "GET"):
                reply = http.request(method, path, headers=auth(served, "worker"))
                assert reply.status_code == 405 and reply.headers["Allow"] == "POST"
                assert reply.json()["error"]["code"] == 4050
