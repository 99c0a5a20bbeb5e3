"""One request, one task fewer: quart-trio's HTTP connection, lighter.

quart-trio runs each request as two tasks in a nursery of its own: one reads
the ASGI messages (the body, then the disconnect that cancels the request),
the other runs the handler. The handler runs here in the nursery's own body,
on the task hypercorn already made for the request, so a request costs one
trio task less; a parked long-poll holds all of them for as long as it waits.
Cancellation is unchanged: the nursery body is inside the nursery's cancel
scope, which either side cancels when it is done::

    app.asgi_http_class = OneTaskHTTPConnection
"""

from __future__ import annotations

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable
from quart_trio.asgi import TrioASGIHTTPConnection


class OneTaskHTTPConnection(TrioASGIHTTPConnection):
    async def __call__(self, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        request = self._create_request_from_scope(send)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.handle_messages, nursery, request, receive)
            await self.handle_request(nursery, request, send)
