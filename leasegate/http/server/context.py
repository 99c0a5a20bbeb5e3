"""What a route reaches beyond its request: the running system; and the few request
headers the gateway reads itself, as the body guard's layer found them (``header``)."""

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
SEEN = "leasegate.headers"  # the scope's key of what body_guard.Guarded found of READ


def header(request: Request, name: bytes) -> str | None:
    """The first value of the request header ``name`` (one of :data:`READ`), as
    ``request.headers.get`` gives it, from what ``body_guard.Guarded`` picked out
    in its walk of the headers (a werkzeug lookup walks them all again)."""
    seen = cast("dict[bytes, bytes] | None", cast(dict[str, Any], request.scope).get(SEEN))
    if seen is None:  # a request that did not come through body_guard.Guarded
        return request.headers.get(name.decode())
    value = seen.get(name)
    return None if value is None else value.decode("latin1")
