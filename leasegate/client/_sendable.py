"""What the gateway takes in a worker's result, and a result made one it takes.

A handler's result, cost, error code or message that the gateway would refuse (400 or
413 for the whole call) is changed before it is sent, never the outcome::

    fixes: list[str] = []
    sent = sendable(result, cost, code, message, fixes)   # fixes: what changed, to log
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from leasegate.client._types import JSONObject

# What the gateway takes in a result (the checks of its routes); a body
# outside these limits is refused (400/413), so the SDK never sends one.
MAX_MESSAGE: Final = 4096
"""The longest error message the gateway takes (characters)."""
MAX_JSON_BYTES: Final = 64 * 1024
"""The most compact JSON (UTF-8 bytes) the gateway takes in ``result`` or ``progress``
(its default ``max_json_field_bytes``)."""
MAX_JSON_DEPTH: Final = 32
"""The deepest nesting of objects and arrays the gateway takes in a JSON field."""
MAX_COST: Final = 2**53
"""Costs are integers 0..2**53 (minor units)."""
MIN_CODE: Final = -(2**31)
MAX_CODE: Final = 2**31 - 1
"""Error codes are 32-bit signed integers."""

NOT_SENT: Final = "leasegate_sdk"
"""The key of the small object sent in place of a result the gateway would refuse:
``{"leasegate_sdk": "result not sent: <why>"}``."""



def _too_deep(value: Any) -> bool:
    """Nested deeper than the gateway takes (without recursion; a cycle is 'too deep')."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > MAX_JSON_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def checked_json(value: Any) -> tuple[Any, str | None]:
    """``(a detached copy, None)`` if the gateway takes ``value`` as a ``result`` or
    ``progress``: JSON without NaN or infinities, valid UTF-8, nested at most
    ``MAX_JSON_DEPTH`` levels, at most ``MAX_JSON_BYTES`` of compact JSON. Else
    ``(None, why not)``."""
    if _too_deep(value):
        return None, f"nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        size = len(text.encode())
    except (TypeError, ValueError, RecursionError) as error:  # NaN, a set, a lone surrogate
        return None, f"not JSON: {_short(_prose(str(error)))}"
    if size > MAX_JSON_BYTES:
        return None, f"{size} bytes of JSON, over the gateway's limit of {MAX_JSON_BYTES}"
    return json.loads(text), None


def checked_object(value: Any) -> tuple[JSONObject | None, str | None]:
    """:func:`checked_json`, for a checkpoint: it must also be a JSON object."""
    copied, why = checked_json(value)
    if why is None and not isinstance(copied, dict):
        return None, "not a JSON object"
    return copied, why


def _prose(text: str) -> str:
    """``text`` as valid UTF-8 (an unpaired surrogate spelled out as ``\\udc80``)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _message(text: str) -> str:
    return _short(_prose(text), MAX_MESSAGE)


def _integer(value: Any, low: int, high: int) -> int | None:
    """``value`` as an int in ``low..high`` (an integral float counts), else None."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


@dataclass(frozen=True)
class Sendable:
    """A result's fields as the gateway takes them."""

    result: Any
    cost: int | None
    code: int | None
    message: str


def sendable(result: Any, cost: Any, code: Any, message: str, fixes: list[str]) -> Sendable:
    """The fields as sent: a result the gateway would refuse replaced, an invalid cost or
    code left out, an over-long message cut; each change appended to ``fixes``."""
    if result is not None:
        result, why = checked_json(result)
        if why is not None:
            fixes.append(f"result not sent: {why}")
            result = {NOT_SENT: f"result not sent: {why}"}
    if cost is not None:
        valid_cost = _integer(cost, 0, MAX_COST)
        if valid_cost is None:
            fixes.append(f"cost {_short(repr(cost))} left out: not an integer 0..2**53")
        cost = valid_cost
    if code is not None:
        valid_code = _integer(code, MIN_CODE, MAX_CODE)
        if valid_code is None:
            fixes.append(f"error code {_short(repr(code))} left out: not a 32-bit integer")
        code = valid_code
    sent_message = _message(message)
    if sent_message != message:
        fixes.append(f"error message of {len(message)} characters cut to {MAX_MESSAGE} "
                     "(or spelled as valid UTF-8)")  # fmt: skip
    return Sendable(result, cost, code, sent_message)
