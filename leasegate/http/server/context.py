"""What a route reaches beyond its request: the running system; the few request
headers the gateway reads itself, as the body guard's layer found them (``header``);
and the ``100 Continue`` its client may wait for.

``Expect: 100-continue``: the ``100 Continue`` goes out once the request's checks
have passed, never before.

hypercorn answers ``100 Continue`` as soon as it has read a request head, before the
app has seen it: a client with a wrong key, or uploading to a task it holds no lease
of, is invited to send its whole body only to be refused. The gateway's HTTP/1.1
protocol (``expect.py``) holds the 100 back and leaves a way to send it in the
request's scope; the app sends it when the body is wanted: after the key and the
route's roles (``preflight``), or, for a route marked :func:`checks_before_body`,
when the route has made checks of its own (an artifact upload: its task and lease)::

    await continue_body(request.scope)   # the client may send its body now

A request answered before that gets no 100 (its client sends no body, and its
connection closes after the answer: see ``body_guard``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

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


# The scope's keys: set once the body is wanted; the protocol's sender of the 100,
# left there while the 100 is held back.
WANTED = "leasegate.body_wanted"
SEND_CONTINUE = "leasegate.send_continue"

View = TypeVar("View", bound=Callable[..., Any])


async def continue_body(scope: Any) -> None:
    """The request's checks have passed: a client waiting for ``100 Continue`` gets it
    now (or as soon as the protocol comes to it). Idempotent."""
    if scope.get(WANTED):
        return
    scope[WANTED] = True
    send: Callable[[], Awaitable[None]] | None = scope.pop(SEND_CONTINUE, None)
    if send is not None:
        await send()


def checks_before_body(view: View) -> View:
    """Mark a route that calls :func:`continue_body` itself, once its own checks of the
    request have passed (preflight does not, for it)."""
    view.continues_body_itself = True  # type: ignore[attr-defined]
    return view


def continues_body_itself(view: object) -> bool:
    return bool(getattr(view, "continues_body_itself", False))
