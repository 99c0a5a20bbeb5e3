"""The app's one ASGI layer (the body guard), its preflight and its validation, seen
through the ASGI messages an app sends and the answers a caller gets."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from leasegate.http.server.preflight import Preflight
from tests.conftest import Gateway

Messages = list[dict[str, Any]]


async def asgi_call(gateway: Gateway, method: str, path: str, body: bytes = b"",
                    headers: list[tuple[bytes, bytes]] | None = None) -> Messages:
    """One request through the app as hypercorn calls it; the messages it sent."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 40000),
             "server": ("127.0.0.1", 8470),
             "headers": [(b"host", b"gw"), (b"content-length", str(len(body)).encode()),
                         *(headers or [])]}
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent: Messages = []
    answered = trio.Event()

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await answered.wait()  # as hypercorn: the disconnect comes after the answer
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    await gateway.app(scope, receive, send)
    return sent


async def test_an_answer_says_its_length_and_request_id(gateway: Gateway) -> None:
    key = gateway.keys["t1"].encode()
    sent = await asgi_call(gateway, "POST", "/v1/queries",
                           b'{"site": "s", "kind": "k", "params": {}}',
                           [(b"authorization", b"Bearer " + key),
                            (b"content-type", b"application/json")])
    assert sent[0]["status"] == 201
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"] == b"application/json"
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert int(headers[b"content-length"]) == len(body)
    assert b'"status":"queued"' in body and not sent[-1]["more_body"]
    assert headers[b"x-request-id"]


async def test_an_early_answer_on_http1_still_goes_whole(gateway: Gateway) -> None:
    """No key: 401 before the body is read, and the body guard's bookkeeping does not
    hold the answer back."""
    sent = await asgi_call(gateway, "POST", "/v1/queries", b"{}",
                           [(b"content-type", b"application/json")])
    assert sent[0]["status"] == 401
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert b'"code":4010' in body and not sent[-1]["more_body"]




async def test_route_plans_are_worked_out_once(gateway: Gateway) -> None:
    preflight = Preflight(gateway.app, gateway.system, gateway.app.extensions["leasegate.auth"])
    submit = preflight.plan("queries.submit_query")
    assert preflight.plan("queries.submit_query") is submit
    assert not submit.public and not submit.takes_query and submit.roles is not None
    get_task = preflight.plan("tasks.get_task")
    assert get_task.takes_query and get_task.id_args == ("task_id",)
    assert preflight.plan("admin.health").public
    assert preflight.plan(None).public  # a 404 or 405: answered without a key


@pytest.mark.parametrize(("path", "query", "status"), [
    ("/v1/queries/lease", "", 405),  # a fixed path wins over /v1/queries/{query_id}
    ("/health", "?verbose=1", 400),  # no query parameters taken: refused
])
async def test_preflight_answers_before_the_route(gateway: Gateway, path: str, query: str,
                                                  status: int) -> None:
    code, body = await gateway.call("GET", path + query, "t1")
    assert code == status, body


async def test_a_body_that_does_not_fit_is_400_with_the_field(gateway: Gateway) -> None:
    code, body = await gateway.call("POST", "/v1/queries", "t1",
                                    json={"site": "s", "kind": "k", "params": {}, "typo": 1})
    assert code == 400 and body["error"]["code"] == 4000
    assert "typo" in body["error"]["message"]

