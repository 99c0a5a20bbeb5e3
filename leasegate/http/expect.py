"""``Expect: 100-continue`` with a body the route refuses anyway: no ``100 Continue``.

hypercorn answers ``100 Continue`` itself, as soon as it has read the request
head and before the app has seen it, so a client announcing 60 MiB for a
1 MiB route is invited to send all of it only to be told 413. This hook lets
hypercorn's HTTP/1.1 protocol skip the 100 when the declared length is over
the route's limit; the app then answers 413 (or 401/403 first), with
``Connection: close`` (see body_guard)::

    expect.install(settings)   # once, before hypercorn serves

The same hook writes a sized response (``Content-Length``: every answer but a
stream) in one socket write: hypercorn sends the head, the body and the (empty)
end of the message as three writes, each with a lock and a shielded send.
"""

from __future__ import annotations

from typing import cast

import h11
import hypercorn.protocol
from hypercorn.events import RawData
from hypercorn.protocol.events import Event, Response, StreamClosed
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.typing import H11SendableEvent

from leasegate.http.body_guard import Message, withholds_continue
from leasegate.settings import Settings


def install(settings: Settings) -> None:
    """Make hypercorn's HTTP/1.1 connections use :class:`ExpectAwareH11` with these
    settings' limits (hypercorn has no setting for its protocol class, nor a hook for
    its 100 or its writes: ``_send_h11_event`` is private; the names relied on are
    checked by tests/test_framework_internals.py, and pyproject.toml bounds hypercorn)."""

    class ExpectAwareH11(H11Protocol):
        _hold_head = False  # the next head is of a sized response: wait for its body
        _held = b""  # that head, as h11 wrote it

        async def stream_send(self, event: Event) -> None:
            if isinstance(event, Response) and event.status_code >= 200:
                self._hold_head = _sized(event.headers)
            elif isinstance(event, StreamClosed) and self._held:
                await self._write(b"")  # a body that never came: the head still goes
            await super().stream_send(event)

        async def _send_h11_event(self, event: H11SendableEvent) -> None:
            if (isinstance(event, h11.InformationalResponse) and event.status_code == 100
                    and isinstance(self.stream, HTTPStream)
                    and withholds_continue(settings, cast(Message, self.stream.scope))):
                return  # h11 forgets the pending 100 once the final answer is sent
            hold, self._hold_head = (self._hold_head and isinstance(event, h11.Response)), False
            try:
                data = self.connection.send(event)
            except h11.LocalProtocolError:
                if self.connection.their_state != h11.ERROR:
                    raise
                data = None
            if hold and data is not None:
                self._held = data
            elif data or self._held:  # an empty end of message is not worth a write
                await self._write(data or b"")

        async def _write(self, data: bytes) -> None:
            data, self._held = self._held + data, b""
            await self.send(RawData(data=data))

    hypercorn.protocol.H11Protocol = ExpectAwareH11  # type: ignore[attr-defined]


def _sized(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() == b"content-length" for name, _ in headers)
