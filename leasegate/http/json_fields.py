"""JSON fields a caller sends that we store and hand out again (params, result,
progress) must be sound and small::

    check_json_field("params", body.params)   # 400 / 413 (max_json_field_bytes), or nothing
"""

from __future__ import annotations

from typing import Any

from leasegate.actors.payloads import encoded_size
from leasegate.errors import InvalidRequest, PayloadTooLarge
from leasegate.http.context import system

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
    """400 for nesting deeper than ``MAX_JSON_DEPTH``, NaN or infinities (not JSON)
    and unpaired surrogates (not UTF-8): each would break every later response
    that carries it. 413 over ``max_json_field_bytes`` (never truncated)."""
    if value is None:
        return
    if _depth(value) > MAX_JSON_DEPTH:
        raise InvalidRequest(f"{name} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        size = encoded_size(value)
    except ValueError:  # NaN, Infinity; UnicodeEncodeError is a ValueError too
        raise InvalidRequest(f"{name} holds a value JSON cannot carry "
                             "(NaN, Infinity or an unpaired surrogate)") from None
    limit = system().settings.max_json_field_bytes
    if size > limit:
        raise PayloadTooLarge(f"{name} is {size} bytes of JSON; the limit is {limit}")
