"""Callers' payloads as stored text: one spelling per value, and its digest.

Equal payloads must compare equal as text, so that an idempotent replay is
recognised and a different payload under the same id is not::

    text = canonical_json({"b": 1, "a": 2})      # '{"a":2,"b":1}'
    digest = fingerprint(tenant, site, text)

A payload comes back exactly as it was sent. A number that Python's ``int`` or
``float``, or orjson, would spell otherwise (``1e2``, ``1.50``, ``-0``, ``1e-05``,
an integer past 64 bits, a decimal longer than a double holds) is read as a
:class:`Number`, which keeps its literal and is written as that literal again::

    exact_loads('{"n": 1e2, "m": 1.5}')   # {'n': Number('1e2'), 'm': 1.5}
    canonical_json(_)                     # '{"m":1.5,"n":1e2}'
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

import orjson


class Number:
    """A JSON number kept as its literal, where ``int`` or ``float`` would change it
    (see :func:`exact_loads`). The gateway does no arithmetic on payloads, so it
    keeps no value; and being no ``int`` or ``float``, a writer that does not know
    it fails loudly instead of spelling it otherwise."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal

    def __eq__(self, other: object) -> bool:
        return type(other) is Number and other.literal == self.literal

    def __hash__(self) -> int:
        return hash(self.literal)

    def __repr__(self) -> str:
        return f"Number({self.literal!r})"


_UINT64 = 2**64
_INT64 = 2**63


def _integer(literal: str) -> int | Number:
    # An int of 64 bits spells back as it came (JSON has no leading zeros and no "+")
    # and orjson writes it; past that a Number, which also spares int() its quadratic
    # work on a 60,000-digit literal (and its refusal past 4,300 digits).
    if literal != "-0" and len(literal) <= 20:
        value = int(literal)
        if -_INT64 <= value < _UINT64:
            return value
    return Number(literal)


def _fraction(literal: str) -> float | Number:
    # A float spells back as it came if both writers spell it so: the standard
    # library (repr: the stored text) and orjson (the responses), which differ at
    # times (1e-05 and 0.00001). An infinity (1e400) stays a float: the payload checks
    # refuse it, as JSON cannot carry it.
    value = float(literal)
    if not math.isfinite(value) or (repr(value) == literal
                                    and orjson.dumps(value) == literal.encode()):
        return value
    return Number(literal)


# Where a number might not be plain: JSON spells a fraction or an exponent with a
# digit before ".", "e" or "E", and -0 with no digit after it; past 64 bits an integer
# has 19 digits or more (-9300000000000000000). With each digit as "0" and ".eE" as
# "e", that is "0e" or a run of 19 zeros, found by bytes' own search (a regex takes
# several times longer than orjson's parse). Text in a string that looks so (a version
# "1.2", an id "3e8") only costs the exact parse, never exactness.
_CLASSES = bytes.maketrans(b"123456789.E", b"000000000ee")
_LONG = b"0" * 19
_MINUS_ZERO = re.compile(rb"-0(?![0-9])")


def may_hold_numbers(text: str | bytes) -> bool:
    """Whether ``text`` may hold a number that only :func:`exact_loads` reads as it
    was sent (a parse by orjson, or ``int``/``float``, would spell it otherwise)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    classes = data.translate(_CLASSES)
    return (b"0e" in classes or _LONG in classes  # no any(): a generator a call is dear
            or _MINUS_ZERO.search(data) is not None)


def exact_loads(text: str | bytes) -> Any:
    """JSON text as Python, each number as it was spelled: an ``int`` or ``float``
    where Python spells it so, else a :class:`Number`. Most text has no such number
    and is orjson's parse (as quick as it gets)."""
    if not may_hold_numbers(text):
        return orjson.loads(text)
    return parse_exactly(text)


def stored_loads(text: str) -> Any:
    """:func:`exact_loads` of text this gateway wrote (a stored payload or event):
    where orjson writes its parse back byte for byte, that parse (stored text is
    compact, its keys in order, so a float such as 12.5 passes; -0, 1e2, 1e-05 or an
    integer past 64 bits does not), else the exact parse (several times slower)."""
    if not may_hold_numbers(text):
        return orjson.loads(text)
    value = orjson.loads(text)
    if orjson.dumps(value) == text.encode():
        return value
    return parse_exactly(text)


def parse_exactly(text: str | bytes) -> Any:
    """:func:`exact_loads` without its look for numbers that need it (the caller
    has looked)."""
    if isinstance(text, str):
        return _EXACT.decode(text)  # one decoder, not one a call as json.loads makes
    return json.loads(text, parse_int=_integer, parse_float=_fraction)  # finds the encoding


_EXACT = json.JSONDecoder(parse_int=_integer, parse_float=_fraction)


def orjson_default(value: object) -> orjson.Fragment:
    """orjson's ``default=``: a :class:`Number` as its literal."""
    if type(value) is Number:
        return orjson.Fragment(value.literal)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


class _HoldsNumbers(Exception):
    pass


def _no_numbers(value: object) -> Any:
    if type(value) is Number:
        raise _HoldsNumbers
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _stdlib_json(value: Any, **options: Any) -> str:
    """The standard library's compact JSON; a value holding a :class:`Number` by
    :func:`_exact_parts`, since the standard library cannot write a literal."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                          default=_no_numbers, **options)
    except _HoldsNumbers:
        return "".join(_exact_parts(value, []))


# The standard library's own spelling of a string (encode_basestring, in C).
_STRING = json.JSONEncoder(ensure_ascii=False).encode


def _exact_parts(value: Any, parts: list[str]) -> list[str]:
    """``canonical_json`` of a value that holds a :class:`Number`, as pieces: the
    standard library's spelling of everything else, keys sorted, NaN refused."""
    if type(value) is Number:
        parts.append(value.literal)
    elif isinstance(value, str):
        parts.append(_STRING(value))
    elif value is None or isinstance(value, bool):
        parts.append("null" if value is None else "true" if value else "false")
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("Out of range float values are not JSON compliant")
        parts.append(float.__repr__(value))
    elif isinstance(value, dict):
        parts.append("{")
        for i, key in enumerate(sorted(value)):
            if type(key) is not str:  # a Number only comes from JSON text: str keys
                raise TypeError(f"keys must be str, not {type(key).__name__}")
            parts.append("," if i else "")
            parts.append(_STRING(key) + ":")
            _exact_parts(value[key], parts)
        parts.append("}")
    elif isinstance(value, list | tuple):
        parts.append("[")
        for i, item in enumerate(value):
            parts.append("," if i else "")
            _exact_parts(item, parts)
        parts.append("]")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return parts


def canonical_json(value: Any) -> str:
    """One spelling per value, so equal payloads compare equal as text."""
    return _stdlib_json(value, sort_keys=True, allow_nan=False)


def stored_json(value: Any) -> str | None:
    """What is stored of an optional payload: None for None, else its canonical JSON."""
    return None if value is None else canonical_json(value)


def compact_json(value: Any) -> str:
    """Compact JSON text where the spelling does not matter (no digest is taken of it):
    orjson's, three times quicker; the standard library's for what orjson refuses
    (integers past 64 bits, keys that are not strings)."""
    try:
        return orjson.dumps(value, default=orjson_default).decode()
    except TypeError:  # orjson.JSONEncodeError
        return _stdlib_json(value)


def fingerprint(*parts: Any) -> str:
    """A digest of a submission or a result, for idempotent replays."""
    return hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as canonical JSON; ValueError if JSON cannot carry it
    (NaN, infinities, unpaired surrogates)."""
    return len(canonical_json(value).encode())
