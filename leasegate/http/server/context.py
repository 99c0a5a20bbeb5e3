"""What a route reaches beyond its request: the running system; and the few request
headers the gateway reads itself, as the connection class found them (``header``)."""

from __future__ import annotations

from typing import Any, cast

from quart import Request, current_app

from leasegate.system import System


def system() -> System:
    found: System = current_app.extensions["leasegate"]
    return found


# The request headers the gateway reads itself (lower case, as in the ASGI scope).
READ = frozenset({b"authorization", b"x-request-id", b"content-length", b"content-type",
                  b"transfer-encoding", b"expect"})
SEEN = "leasegate.headers"  # the scope's key of what make_request found of READ


def header(request: Request, name: bytes) -> str | None:
    """The first value of the request header ``name`` (one of :data:`READ`), as
    ``request.headers.get`` gives it, from what ``connection.make_request`` picked out
    in its walk of the headers (a werkzeug lookup walks them all again)."""
    seen = cast("dict[bytes, bytes] | None", cast(dict[str, Any], request.scope).get(SEEN))
    if seen is None:  # a request the connection class did not make
        return request.headers.get(name.decode())
    value = seen.get(name)
    return None if value is None else value.decode("latin1")
