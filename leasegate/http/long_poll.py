"""Long-polls: ask an actor, letting it hold the reply for a while; each one parked
holds one of its caller's places (see :mod:`leasegate.http.parked`)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio
from quart import current_app, g

from leasegate.actors.mailbox import Ask, Mailbox, Tell
from leasegate.http.auth import client_address
from leasegate.http.parked import ParkedPolls

R = TypeVar("R")
T = TypeVar("T")


def long_poll(mailbox: Mailbox, message: Ask[R], wait_seconds: float, max_wait: float,
              give_back: Callable[[R], Tell | None], on_timeout: T) -> Awaitable[R | T]:
    """Ask, letting the actor hold the reply for up to ``wait_seconds`` (0: just ask;
    never longer than ``max_wait``).

    Cancellation (the HTTP client disconnected: quart-trio cancels the handler):
    a reply that was already on its way is given back to the actor (see
    ``Mailbox.ask_parked``).

    Not a coroutine itself, to hand back the mailbox's own: a parked poll holds
    its whole chain of coroutine frames for as long as it waits.
    """
    if wait_seconds <= 0:
        return mailbox.ask(message)
    wait = min(wait_seconds, max_wait)
    return mailbox.ask_parked(message, deadline=trio.current_time() + wait,
                              give_back=give_back, on_timeout=on_timeout)


def parked_polls() -> ParkedPolls:
    found: ParkedPolls = current_app.extensions["leasegate.parked"]
    return found


def parked(wait_seconds: float | None,
           max_wait: float) -> contextlib.AbstractContextManager[None]:
    """Inside it, a poll of up to ``wait_seconds`` (never longer than ``max_wait``) holds
    a place of the authenticated caller's key and address; 429 (4290) when either has
    none left. A poll that does not wait (0, None) needs none."""
    if not wait_seconds:
        return contextlib.nullcontext()
    return parked_polls().hold(g.principal.key_id, client_address(),
                               min(wait_seconds, max_wait))


async def read_settled(mailbox: Mailbox, now: Ask[R], settled: Ask[R],
                       wait_seconds: float | None, max_wait: float) -> R:
    """``GET /v1/<jobs>/{id}?wait_seconds=``: the job once ``settled`` answers (the
    actor parks it until the job ends), or as ``now`` finds it when the wait runs out
    (or ``wait_seconds`` is 0). A reply lost to a gone caller costs nothing: a read."""
    if wait_seconds:
        with parked(wait_seconds, max_wait):
            found = await long_poll(mailbox, settled, wait_seconds, max_wait,
                                    lambda _: None, None)
        if found is not None:
            return found
    return await mailbox.ask(now)
