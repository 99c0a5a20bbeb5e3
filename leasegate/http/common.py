"""Helpers every route module shares: the system, size limits, long-polls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
from quart import current_app

from leasegate.actors.common import Page, canonical_json
from leasegate.actors.mailbox import Mailbox
from leasegate.actors.system import System
from leasegate.errors import InvalidRequest, PayloadTooLarge
from leasegate.http.models import ListArgs


def system() -> System:
    found: System = current_app.extensions["leasegate"]
    return found


MAX_JSON_DEPTH = 32


def _depth(value: Any) -> int:
    """Nesting depth, without recursion (a hostile document is deep by design)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def check_json_field(name: str, value: Any) -> None:
    """A caller's JSON field that we store and hand out again must be sound.

    400 for nesting deeper than ``MAX_JSON_DEPTH``, NaN or infinities (not
    JSON) and unpaired surrogates (not UTF-8): each would break every later
    response that carries it. 413 over ``max_json_field_bytes`` (never truncated).
    """
    if value is None:
        return
    if _depth(value) > MAX_JSON_DEPTH:
        raise InvalidRequest(f"{name} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        size = len(canonical_json(value).encode())
    except ValueError:  # NaN, Infinity; UnicodeEncodeError is a ValueError too
        raise InvalidRequest(f"{name} holds a value JSON cannot carry "
                             "(NaN, Infinity or an unpaired surrogate)") from None
    limit = system().settings.max_json_field_bytes
    if size > limit:
        raise PayloadTooLarge(f"{name} is {size} bytes of JSON; the limit is {limit}")


def page(args: ListArgs) -> Page:
    return Page(limit=args.limit, offset=args.offset)


async def long_poll(mailbox: Mailbox, message: Any, wait_seconds: float,
                    give_back: Callable[[Any], Any | None], on_timeout: Any) -> Any:
    """Ask, letting the actor hold the reply for up to ``wait_seconds`` (0: just ask).

    If the client disconnects (quart-trio cancels this handler), a reply that
    was already on its way is given back to the actor (see ``ask_parked``).
    """
    if wait_seconds <= 0:
        return await mailbox.ask(message)
    wait = min(wait_seconds, system().settings.max_wait_seconds)
    return await mailbox.ask_parked(message, deadline=trio.current_time() + wait,
                                    give_back=give_back, on_timeout=on_timeout)
