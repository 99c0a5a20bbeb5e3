"""JSON fields a caller sends that we store and hand out again (params, result,
progress) must be sound and small::

    check_json_field("params", body.params)   # 400 / 413 (max_json_field_bytes), or nothing

A batch route checks up to 100 items' fields: it reads the limit once and passes
it (``limit=``), and the checks themselves are one walk and, for the common
document, orjson's encoding instead of the standard library's.
"""

from __future__ import annotations

from typing import Any

import orjson

from leasegate.actors.payloads import encoded_size, parse_exactly
from leasegate.errors import InvalidRequest, PayloadTooLarge
from leasegate.http.server.context import system

MAX_JSON_DEPTH = 32

# Values whose orjson spelling has as many bytes as the canonical one (the standard
# library's, sort order aside): both escape strings alike (every code point checked),
# and neither spells these types otherwise. Floats are not among them: their
# spellings differ (1e+16 and 1e16), and orjson writes NaN as null.
_SAME_LENGTH = frozenset({str, int, bool, type(None)})


def _scan(value: Any) -> tuple[int, bool]:
    """Nesting depth (counted no further than one past ``MAX_JSON_DEPTH``: a hostile
    document is deep by design, so level by level, without recursion), and whether
    every value in it is a dict, list or one of ``_SAME_LENGTH`` (exact types).

    Only containers are kept for the next level; a leaf costs one type lookup."""
    if not isinstance(value, dict | list):
        return 0, type(value) in _SAME_LENGTH
    depth, same_length, level = 0, type(value) is dict or type(value) is list, [value]
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            break
        below: list[Any] = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                kind = type(child)
                if kind is dict or kind is list:
                    below.append(child)
                elif kind not in _SAME_LENGTH:
                    same_length = False  # a float, or a subclass (nested all the same)
                    if isinstance(child, dict | list):
                        below.append(child)
        level = below
    return depth, same_length


def _encoded_size(value: Any, same_length: bool) -> int:
    """``encoded_size``, by orjson where its length is the same."""
    if same_length:
        try:
            return len(orjson.dumps(value))
        except TypeError:  # past 64 bits, a surrogate, a key not a string: as canonical
            pass
    return encoded_size(value)


def check_json_field(name: str, value: Any, limit: int | None = None) -> None:
    """400 for nesting deeper than ``MAX_JSON_DEPTH``, NaN or infinities (not JSON)
    and unpaired surrogates (not UTF-8): each would break every later response
    that carries it. 413 over ``limit`` (default ``max_json_field_bytes``; never
    truncated)."""
    if value is None:
        return
    depth, same_length = _scan(value)
    if depth > MAX_JSON_DEPTH:
        raise InvalidRequest(f"{name} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        size = _encoded_size(value, same_length)
    except ValueError:  # NaN, Infinity; UnicodeEncodeError is a ValueError too
        raise InvalidRequest(f"{name} holds a value JSON cannot carry "
                             "(NaN, Infinity or an unpaired surrogate)") from None
    if limit is None:
        limit = system().settings.max_json_field_bytes
    if size > limit:
        raise PayloadTooLarge(f"{name} is {size} bytes of JSON; the limit is {limit}")


# The fields of a request body (or of an item of its lists) that are payloads, kept
# exactly, and its lists of items: a batch's, and the results a lease call carries;
# and a schedule's template, a submit body whose params each fire sends.
PAYLOAD_FIELDS = ("params", "result", "progress")
ITEM_LISTS = ("items", "results")
TEMPLATE = "template"


def with_exact_payloads(document: Any, text: str | bytes) -> Any:
    """``document``, a request body parsed as usual, with its payload fields (its own,
    its items' and its template's) read from ``text`` by ``parse_exactly``: each
    number as it was sent. The other fields keep the usual numbers (``wait_seconds:
    1e1`` is a number of seconds, not a literal to keep)."""
    exact = parse_exactly(text)
    _take_payloads(document, exact)
    _take_payloads(_field(document, TEMPLATE), _field(exact, TEMPLATE))
    for name in ITEM_LISTS:
        items, exact_items = _field(document, name), _field(exact, name)
        if isinstance(items, list) and isinstance(exact_items, list):
            for item, exact_item in zip(items, exact_items, strict=False):
                _take_payloads(item, exact_item)
    return document


def _field(document: Any, name: str) -> Any:
    return document.get(name) if isinstance(document, dict) else None


def _take_payloads(document: Any, exact: Any) -> None:
    if isinstance(document, dict) and isinstance(exact, dict):
        for name in PAYLOAD_FIELDS:
            if name in document and name in exact:
                document[name] = exact[name]
