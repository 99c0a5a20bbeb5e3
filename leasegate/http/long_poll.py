"""Long-polls: ask an actor, letting it hold the reply for a while."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from leasegate.actors.runtime.mailbox import Ask, Ref, Tell
from leasegate.http.context import system
from leasegate.http.render import to_json

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
    ``Ref.ask_parked``).

    Not a coroutine itself, to hand back the ref's own: a parked poll holds its
    whole chain of coroutine frames for as long as it waits.
    """
    if wait_seconds <= 0:
        return ref.ask(message)
    wait = min(wait_seconds, max_wait)
    return ref.ask_parked(message, deadline=trio.current_time() + wait, give_back=give_back,
                          on_timeout=on_timeout)


async def lease_reply(ref: Ref[A], message: Ask[A, tuple[L, ...]], wait_seconds: float,
                      give_back: Callable[[tuple[L, ...]], Tell[A] | None]) -> dict[str, Any]:
    """``POST /v1/<jobs>/lease``: the leases, after up to ``wait_seconds`` for work
    (``max_wait_seconds`` at most); none when the wait ran out."""
    items = await long_poll(ref, message, wait_seconds, system().settings.max_wait_seconds,
                            give_back, ())
    return {"items": to_json(items)}
