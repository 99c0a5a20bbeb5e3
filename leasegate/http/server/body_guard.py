"""Every answer leaves its keep-alive connection usable or closed, never stuck.

A route may answer before it has read the request body (401, 403, 413, a bad
id...). hypercorn then stops handing the rest of the body to anyone: its
queue to the finished app fills, its reader blocks, and the next request on
that connection waits for an answer that never comes. An :class:`Exchange`
stands between hypercorn's ``receive``/``send`` and the request (:class:`Guarded`,
the one layer of ours around the app, makes one per HTTP/1.x request) and, when
the response starts while the body is still arriving, lets the answer go out at
once and then, before the exchange ends:

* reads the rest of a declared length within ``drain_bytes`` and throws it
  away (for at most ``DRAIN_SECONDS``), so the connection stays reusable; if it
  does not come in that time, hypercorn closes the connection (the body is
  unread; the client has not finished its request, so it cannot have sent
  another on it); or, when draining cannot work or cannot be promised (a
  declared length over the bound, a chunked body of unknown length, a 408, a
  body the client holds back until a ``100 Continue`` it did not get: an answer
  before the request's checks passed, see ``context``),
* answers with ``Connection: close`` and keeps discarding for a moment
  (``LINGER_SECONDS``) before hypercorn closes the socket, so that closing
  on unread bytes does not reset the connection under the answer.

The answer never waits for the body: a client that announces a body and
sends none (or sends it only after reading the answer) has its answer at once.

::

    app.asgi_app = Guarded(app.asgi_app, settings)   # Quart's way to wrap its app
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, cast

import trio
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGIReceiveEvent,
    ASGISendCallable,
    ASGISendEvent,
)

from leasegate.http.routes.artifacts import body_limit
from leasegate.http.server.context import READ, SEEN, WANTED
from leasegate.settings import Settings

MiB = 1024 * 1024
DRAIN_FLOOR = 16 * MiB
DRAIN_SECONDS = 3.0
LINGER_SECONDS = 1.0

Message = dict[str, Any]  # an ASGI event, read and rebuilt as a plain dict
HTTP1 = frozenset({"1.0", "1.1"})
ASGIApp = Callable[[Any, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _length(value: bytes | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def withholds_continue(settings: Settings, scope: Message) -> bool:
    """Whether the client waits for ``100 Continue`` before sending a body the route
    refuses anyway (its declared length is over the route's limit): it gets its
    413 without a 100, and its body never comes."""
    headers = scope.get("headers", [])
    return _expects_continue(_header(headers, b"expect")) and _over_limit(
        settings, scope, _length(_header(headers, b"content-length")))


def _expects_continue(expect: bytes | None) -> bool:
    return expect is not None and expect.strip().lower() == b"100-continue"


def _over_limit(settings: Settings, scope: Message, declared: int | None) -> bool:
    return declared is not None and declared > body_limit(settings, scope["method"],
                                                          scope["path"])


class BodyLimits:
    """What every exchange of one app checks against, worked out once."""

    __slots__ = ("drain_bytes", "settings")

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.drain_bytes = max(DRAIN_FLOOR, settings.max_artifact_bytes)


class Guarded:
    """The app, with an :class:`Exchange` between it and each HTTP/1.x request
    (HTTP/2 streams end on their own, and forbid a Connection header); and, for every
    HTTP request, the headers the gateway reads itself picked out in one walk of them
    (``context.READ``, for ``context.header``)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.limits = BodyLimits(settings)

    async def __call__(self, scope: Any, receive: ASGIReceiveCallable,
                       send: ASGISendCallable) -> None:
        if scope["type"] == "http":
            seen: dict[bytes, bytes] = {}
            for name, value in scope["headers"]:
                lower = name.lower()
                if lower in READ and lower not in seen:
                    seen[lower] = value
            scope[SEEN] = seen
            if scope["http_version"] in HTTP1:
                exchange = Exchange(self.limits, scope, receive, send, seen)
                receive, send = exchange.receive, exchange.send
        await self.app(scope, receive, send)

class Exchange:
    """One request: how much of its body has arrived, and what its answer must say.

    Slots, and no event until a discard needs one: a waiting long-poll holds this
    for as long as it waits.
    """

    __slots__ = ("_receive", "_scope", "_send", "closing", "complete", "declared",
                 "discarding", "disconnected", "expects_continue", "limits", "received",
                 "settled", "status", "withheld")

    def __init__(self, limits: BodyLimits, scope: Message, receive: ASGIReceiveCallable,
                 send: ASGISendCallable, seen: Mapping[bytes, bytes]) -> None:
        """``seen``: the first value of each of the headers ``content-length``,
        ``transfer-encoding`` and ``expect`` the scope has (:class:`Guarded` looks
        them up in its one walk of the headers)."""
        self.limits = limits
        self._receive = receive
        self._send = send
        length = seen.get(b"content-length")
        self.declared = _length(length)
        chunked = b"transfer-encoding" in seen
        # No Content-Length and no Transfer-Encoding: HTTP/1.1 says there is no body.
        self.complete = not chunked and not self.declared
        self.disconnected = False
        self._scope = scope
        self.expects_continue = _expects_continue(seen.get(b"expect"))
        # Whether the body waits for a 100 that was never sent (so never comes): known
        # once the answer starts.
        self.withheld = False
        self.discarding = False
        self.received = 0
        # Set once the body is complete, gone, or past the bound; made by _discard.
        self.settled: trio.Event | None = None
        self.closing = False
        self.status = 0

    async def receive(self) -> ASGIReceiveEvent:
        message = cast(Message, await self._receive())
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if not message.get("more_body", False):
                self.complete = True
                self._settle()
            if self.discarding:
                if self.received > self.limits.drain_bytes:
                    self._settle()  # too much to drain: the connection closes
                message = {**message, "body": b""}  # the app is done with it: not kept
        elif message["type"] == "http.disconnect":
            self.disconnected = True
            self._settle()
        return cast(ASGIReceiveEvent, message)

    def _settle(self) -> None:
        if self.settled is not None:
            self.settled.set()

    async def send(self, event: ASGISendEvent) -> None:
        message = cast(Message, event)
        if message["type"] == "http.response.start" and not self.complete:
            self.status = int(message["status"])
            self.withheld = self.expects_continue and (
                not self._scope.get(WANTED)
                or _over_limit(self.limits.settings, self._scope, self.declared))
            if not self._may_drain(self.status):
                self.closing = True
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            if message.get("body") and not self.complete:
                # The answer goes out now, whole; the end of it waits for the discard.
                await self._send(cast(ASGISendEvent, {**message, "more_body": True}))
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await self._finish(message)
            return
        await self._send(cast(ASGISendEvent, message))

    async def _finish(self, message: Message) -> None:
        """The last message: hypercorn ends the exchange in it, recycling the
        connection or closing the socket."""
        if not self.complete and not self.withheld and self.status != 408:
            # The whole answer is out: take the rest of the body so the connection
            # is kept, or, when it closes, let the client read the answer before
            # (a 408's client is too slow for that to help).
            await self._discard(LINGER_SECONDS if self.closing else DRAIN_SECONDS)
        # Shielded: while hypercorn hands the app its http.disconnect here, Quart
        # cancels the request, and a cancel in the middle left the socket open.
        # Meanwhile someone must take what still arrives, or hypercorn, whose
        # queue to the app is full, never gets to closing.
        with trio.CancelScope(shield=True):
            if self.complete:  # the common case: nothing left to take, no nursery needed
                await self._send(cast(ASGISendEvent, message))
                return
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump)
                await self._send(cast(ASGISendEvent, message))
                nursery.cancel_scope.cancel()

    def _may_drain(self, status: int) -> bool:
        """Whether the rest of the body can be taken after the answer, keeping the
        connection: only a declared length within the bound (a chunked body may run
        past it, and the answer, already out, could no longer say the connection
        closes: its client would send the next request into a closing socket)."""
        if self.withheld or status == 408:
            return False  # no body is coming, or it is coming too slowly
        return self.declared is not None and self.declared <= self.limits.drain_bytes

    async def _discard(self, seconds: float) -> None:
        """Read and drop body chunks until the body is complete, gone, past the
        bound, or ``seconds`` have passed. The app's own reader (if it still
        runs) drops them too once this starts."""
        self.discarding = True
        if self.complete or self.disconnected:
            return
        settled = self.settled = trio.Event()
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump)
                await settled.wait()
                nursery.cancel_scope.cancel()

    async def _pump(self) -> None:
        while not (self.complete or self.disconnected):
            await self.receive()
