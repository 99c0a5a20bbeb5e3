"""Long-polls: ask an actor, letting it hold the reply for a while; each one waiting
holds one of its caller's places (see :mod:`leasegate.http.server.held_polls`)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
from quart import current_app, g

from leasegate.actors.runtime.mailbox import Ask, Ref, Tell
from leasegate.http.server.auth import client_address
from leasegate.http.server.context import system
from leasegate.http.server.held_polls import WaitingPolls
from leasegate.http.server.render import to_json

A = TypeVar("A")
L = TypeVar("L")
R = TypeVar("R")
T = TypeVar("T")


def long_poll(ref: Ref[A], message: Ask[A, R], wait_seconds: float, max_wait: float,
              give_back: Callable[[R], Tell[A] | None], on_timeout: T) -> Awaitable[R | T]:
    """Ask, letting the actor hold the reply for up to ``wait_seconds`` (0: just ask;
    never longer than ``max_wait``).

    Cancellation (the HTTP client disconnected: quart-trio cancels the handler):
    a reply that was already on its way is given back to the actor (see
    ``Ref.ask_until``).

    Not a coroutine itself, to hand back the ref's own: a waiting poll holds its
    whole chain of coroutine frames for as long as it waits.
    """
    if wait_seconds <= 0:
        return ref.ask(message)
    wait = min(wait_seconds, max_wait)
    return ref.ask_until(message, deadline=trio.current_time() + wait, give_back=give_back,
                          on_timeout=on_timeout)


async def lease_reply(ref: Ref[A], message: Ask[A, tuple[L, ...]], wait_seconds: float,
                      give_back: Callable[[tuple[L, ...]], Tell[A] | None]) -> dict[str, Any]:
    """``POST /v1/<jobs>/lease``: the leases, after up to ``wait_seconds`` for work
    (``max_wait_seconds`` at most); none when the wait ran out."""
    max_wait = system().settings.max_wait_seconds
    with place_while_waiting(wait_seconds, max_wait):
        items = await long_poll(ref, message, wait_seconds, max_wait, give_back, ())
    return {"items": to_json(items)}


def waiting_polls() -> WaitingPolls:
    found: WaitingPolls = current_app.extensions["leasegate.waiting_polls"]
    return found


def place_while_waiting(wait_seconds: float | None,
                        max_wait: float) -> contextlib.AbstractContextManager[None]:
    """Inside it, a poll of up to ``wait_seconds`` (never longer than ``max_wait``) holds
    a place of the authenticated caller's key and address; 429 (4290) when either has
    none left. A poll that does not wait (0, None) needs none."""
    if not wait_seconds:
        return contextlib.nullcontext()
    return waiting_polls().hold(g.principal.key_id, client_address(),
                               min(wait_seconds, max_wait))
