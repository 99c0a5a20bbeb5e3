"""Long-polls: ask an actor, letting it hold the reply for a while."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from leasegate.actors.runtime.mailbox import Ask, Ref, Tell

A = TypeVar("A")
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
