"""``Expect: 100-continue`` with a body the route refuses anyway: no ``100 Continue``.

hypercorn answers ``100 Continue`` itself, as soon as it has read the request
head and before the app has seen it, so a client announcing 60 MiB for a
1 MiB route is invited to send all of it only to be told 413. This hook lets
hypercorn's HTTP/1.1 protocol skip the 100 when the declared length is over
the route's limit; the app then answers 413 (or 401/403 first), with
``Connection: close`` (see body_guard)::

    expect.install(settings)   # once, before hypercorn serves
"""

from __future__ import annotations

from typing import cast

import h11
import hypercorn.protocol
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.typing import H11SendableEvent

from leasegate.http.body_guard import Message, withholds_continue
from leasegate.settings import Settings


def install(settings: Settings) -> None:
    """Make hypercorn's HTTP/1.1 connections use :class:`ExpectAwareH11` with these
    settings' limits (hypercorn has no setting for its protocol class)."""

    class ExpectAwareH11(H11Protocol):
        async def _send_h11_event(self, event: H11SendableEvent) -> None:
            if (isinstance(event, h11.InformationalResponse) and event.status_code == 100
                    and isinstance(self.stream, HTTPStream)
                    and withholds_continue(settings, cast(Message, self.stream.scope))):
                return  # h11 forgets the pending 100 once the final answer is sent
            await super()._send_h11_event(event)

    hypercorn.protocol.H11Protocol = ExpectAwareH11  # type: ignore[attr-defined]
