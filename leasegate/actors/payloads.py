"""Callers' payloads as stored text: one spelling per value, and its digest.

Equal payloads must compare equal as text, so that an idempotent replay is
recognised and a different payload under the same id is not::

    text = canonical_json({"b": 1, "a": 2})      # '{"a":2,"b":1}'
    digest = fingerprint(tenant, site, text)
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson


def canonical_json(value: Any) -> str:
    """One spelling per value, so equal payloads compare equal as text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def stored_json(value: Any) -> str | None:
    """What is stored of an optional payload: None for None, else its canonical JSON."""
    return None if value is None else canonical_json(value)


def compact_json(value: Any) -> str:
    """Compact JSON text where the spelling does not matter (no digest is taken of it):
    orjson's, three times quicker; the standard library's for what orjson refuses
    (integers past 64 bits, keys that are not strings)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def fingerprint(*parts: Any) -> str:
    """A digest of a submission or a result, for idempotent replays."""
    return hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as canonical JSON; ValueError if JSON cannot carry it
    (NaN, infinities, unpaired surrogates)."""
    return len(canonical_json(value).encode())
