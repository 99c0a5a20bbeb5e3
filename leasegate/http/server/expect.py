"""The gateway's HTTP/1.1 protocol: hypercorn's, with two things changed.

* **No ``100 Continue`` before the checks.** hypercorn answers ``100 Continue``
  itself, as soon as it has read the request head and before the app has seen it,
  so a client with a wrong key, or announcing 60 MiB for a 1 MiB route, is invited
  to send all of it only to be told 401 or 413. Here the 100 is held back and the
  app sends it once the request's checks have passed (``context.continue_body``); never when
  the declared length is over the route's limit. The app then answers 413 (or
  401/403/404...) without one, with ``Connection: close`` (see body_guard).
* **A bound on pipelining.** hypercorn reads up to 64 KiB at a time and answers
  every request in it, one after the other, before it reads again: hundreds of
  pipelined requests, queued in one read. After ``MAX_QUEUED`` answers more than the
  one that was in flight, with requests of that read still waiting, the answer says
  ``Connection: close`` and the rest is dropped (a client that pipelines must retry
  what a closed connection left unanswered; none of the usual ones pipelines).

::

    expect.install(settings)   # once, before hypercorn serves
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import cast

import h11
import hypercorn.protocol
from hypercorn.events import Event as ConnectionEvent
from hypercorn.events import RawData
from hypercorn.protocol.events import Event, Response
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.typing import H11SendableEvent

from leasegate.http.server.body_guard import Message, withholds_continue
from leasegate.http.server.context import SEND_CONTINUE, WANTED
from leasegate.settings import Settings

# Answers given, after the one in flight, to requests read ahead in one read from the
# socket, before the connection is closed. Depth enough for any client that pipelines
# on purpose; a caller that queues hundreds costs eight answers, not hundreds.
MAX_QUEUED = 8


def install(settings: Settings) -> None:
    """Make hypercorn's HTTP/1.1 connections use :class:`GatewayH11` with these
    settings' limits (hypercorn has no setting for its protocol class, nor a hook for
    its 100: ``_send_h11_event`` is private; the names relied on are
    checked by tests/test_framework_internals.py, and pyproject.toml bounds hypercorn)."""

    class GatewayH11(H11Protocol):
        _answered = 0  # final answers since the last read from the socket

        async def handle(self, event: ConnectionEvent) -> None:
            if isinstance(event, RawData):
                self._answered = 0
            await super().handle(event)

        async def stream_send(self, event: Event) -> None:
            if isinstance(event, Response) and event.status_code >= 200:
                self._answered += 1
                if self._answered > MAX_QUEUED and self.connection.trailing_data[0]:
                    event = Response(stream_id=event.stream_id, status_code=event.status_code,
                                     headers=[*_closing(event.headers),
                                              (b"connection", b"close")])
            await super().stream_send(event)

        async def _send_h11_event(self, event: H11SendableEvent) -> None:
            if (isinstance(event, h11.InformationalResponse) and event.status_code == 100
                    and isinstance(self.stream, HTTPStream)):
                scope = cast(Message, self.stream.scope)
                if withholds_continue(settings, scope):
                    return  # h11 forgets the pending 100 once the final answer is sent
                if not scope.get(WANTED):  # the app sends it once its checks pass
                    # A weak reference: the scope keeps this sender, and the stream
                    # keeps the scope (a cycle would wait for the garbage collector).
                    scope[SEND_CONTINUE] = partial(self._continue, weakref.ref(self.stream),
                                                   event)
                    return
            await super()._send_h11_event(event)

        async def _continue(self, stream: weakref.ref[HTTPStream],
                            event: h11.InformationalResponse) -> None:
            """The 100 held back for ``stream``, if its client still waits for it."""
            if (self.stream is not None and self.stream is stream()
                    and self.connection.they_are_waiting_for_100_continue):
                await self._send_h11_event(event)

    hypercorn.protocol.H11Protocol = GatewayH11  # type: ignore[attr-defined]


def _closing(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in headers if name.lower() != b"connection"]

