"""One request, one ASGI layer of ours: the app's HTTP connection class.

Quart hands each HTTP request to ``app.asgi_http_class`` (a public hook). Ours is
quart-trio's, with what used to be separate layers folded in:

* **one task fewer**: quart-trio runs each request as two tasks in a nursery of
  its own, one reading the ASGI messages (the body, then the disconnect that
  cancels the request), the other running the handler. The handler runs here in
  the nursery's own body, on the task hypercorn already made for the request; a
  waiting long-poll holds all of them for as long as it waits. Cancellation is
  unchanged: the nursery body is inside the nursery's cancel scope, which either
  side cancels when it is done;
* **the body guard** (``body_guard.Exchange``) on every HTTP/1.x request, in
  the same ``receive``/``send`` (no ASGI middleware around the app);
* **the request made here**, from the scope, as Quart makes it (headers, path,
  limits), through the public ``app.request_class``, in one walk of the scope's
  headers that also picks out the few the gateway reads itself (``context.READ``,
  for ``context.header``, the body guard and the key): a werkzeug ``Headers`` lookup walks
  them all, lower-casing each name, and a miss (no ``X-Request-Id``) is the
  dearest;
* **a sized answer in two ASGI messages**: its head, then its whole body as the
  last message (Quart sends the body and then an empty end of it: one more trip
  through hypercorn per request). Streams (files, event streams) go chunk by
  chunk as before.

::

    app.asgi_http_class = connection_class(settings)
"""

from __future__ import annotations

import math
from typing import Any, cast
from urllib.parse import urlparse

import trio
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGISendCallable,
    ASGISendEvent,
    HTTPScope,
)
from quart.wrappers import Request
from quart.wrappers.response import DataBody
from quart.wrappers.response import Response as QuartResponse
from quart_trio.asgi import TrioASGIHTTPConnection
from werkzeug.datastructures import Headers
from werkzeug.wrappers import Response as WerkzeugResponse

from leasegate.http.server.body_guard import BodyLimits, Exchange, Message
from leasegate.http.server.context import READ, SEEN
from leasegate.settings import Settings

HTTP1 = frozenset({"1.0", "1.1"})
def connection_class(settings: Settings) -> type[GatewayConnection]:
    """The connection class of an app serving with ``settings``' body limits."""

    class Connection(GatewayConnection):
        limits = BodyLimits(settings)

    return Connection


async def _no_push(path: str, headers: Headers) -> None:
    """HTTP/2 server push: nothing of ours pushes."""


class GatewayConnection(TrioASGIHTTPConnection):
    limits: BodyLimits

    async def __call__(self, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        request = self.make_request()
        if self.scope["http_version"] in HTTP1:
            # HTTP/2 streams end on their own (and forbid a Connection header).
            exchange = Exchange(self.limits, cast(Message, self.scope), receive, send,
                                cast(Message, self.scope)[SEEN])
            receive, send = exchange.receive, exchange.send
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.handle_messages, nursery, request, receive)
            await self.handle_request(nursery, request, send)

    def make_request(self) -> Request:
        """The request of this scope, as Quart's connection makes it."""
        scope: HTTPScope = self.scope
        config = self.app.config
        items = [("Remote-Addr", (scope.get("client") or ["<local>"])[0])]
        seen: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            items.append((name.decode("latin1").title(), value.decode("latin1")))
            lower = name.lower()
            if lower in READ and lower not in seen:
                seen[lower] = value
        cast(Message, scope)[SEEN] = seen
        headers = Headers()
        # The list itself, as Headers.add would append each pair: its checks (no newline
        # in a value) are h11's too, before a request reaches us.
        headers._list = items
        if scope["http_version"] < "1.1":
            headers.setdefault("Host", config["SERVER_NAME"] or "")
        path = scope["path"]
        path = path if path[:1] == "/" else urlparse(path).path
        root_path = scope.get("root_path", "")
        if root_path:
            # As Quart: a path outside the root (or the root itself) is one no route has.
            inside = path != root_path and path.startswith(root_path)
            path = path.removeprefix(root_path) if inside else " "
        return self.app.request_class(
            scope["method"], scope["scheme"], path, scope["query_string"], headers,
            root_path, scope["http_version"], scope,
            max_content_length=config["MAX_CONTENT_LENGTH"],
            body_timeout=config["BODY_TIMEOUT"], send_push_promise=_no_push)

    async def handle_request(  # type: ignore[override]
        self, nursery: trio.Nursery, request: Request, send: ASGISendCallable
    ) -> None:
        response = await self.app.handle_request(request)
        if isinstance(response, QuartResponse) and response.timeout is not Ellipsis:
            timeout = cast(float | None, response.timeout)
        else:
            timeout = self.app.config["RESPONSE_TIMEOUT"]
        with trio.move_on_after(math.inf if timeout is None else timeout):
            await answer(send, response)
        nursery.cancel_scope.cancel()


async def answer(send: ASGISendCallable, response: QuartResponse | WerkzeugResponse) -> None:
    """Send ``response``: a body held whole goes as one last message."""
    await send(cast(ASGISendEvent, {
        "type": "http.response.start", "status": response.status_code,
        "headers": [(k.lower().encode(), v.encode()) for k, v in response.headers.items()]}))
    if isinstance(response, WerkzeugResponse):
        parts: list[Any] = list(response.response)
        if len(parts) == 1:
            await _last(send, _bytes(parts[0]))
            return
        for part in parts:
            await _more(send, _bytes(part))
    else:
        body = response.response
        if isinstance(body, DataBody) and body.begin == 0 and body.end == len(body.data):
            await _last(send, body.data)
            return
        async with body as chunks:
            async for chunk in chunks:
                await _more(send, _bytes(chunk))
    await _last(send, b"")


def _bytes(chunk: bytes | str) -> bytes:
    return chunk.encode() if isinstance(chunk, str) else chunk


async def _more(send: ASGISendCallable, chunk: bytes) -> None:
    await send(cast(ASGISendEvent, {"type": "http.response.body", "body": chunk,
                                    "more_body": True}))


async def _last(send: ASGISendCallable, chunk: bytes) -> None:
    await send(cast(ASGISendEvent, {"type": "http.response.body", "body": chunk,
                                    "more_body": False}))
