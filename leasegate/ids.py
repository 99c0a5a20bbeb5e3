"""The id alphabet of the API, one definition for bodies, paths, headers and actors,
and the form of its API keys.

Ids supplied by callers (task, query, worker, device, request ids, refs, sites,
accounts, kinds) are 1-64 characters of ``[A-Za-z0-9._:@-]``; artifact names
are 1-128 of ``[A-Za-z0-9._-]``, not starting with a dot. Anything else is
refused, never truncated. Matching is always whole-string (``fullmatch``):
``$`` would accept a trailing newline::

    is_id("order-1")     # True
    is_id("order-1\\n")  # False

API keys on the wire and at rest are ``lg_<key_id>_<secret>``, stored as a hash:
the HTTP layer checks presented keys, the storage layer creates them::

    key_id, secret, key = new_key()
    stored = hash_secret(secret)                 # only this is kept
    split_key(key)                               # (key_id, secret)
    secret_matches(secret, stored)               # True, in constant time
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Final

ID_PATTERN: Final = r"^[A-Za-z0-9._:@-]{1,64}$"  # for pydantic and the OpenAPI document
ARTIFACT_NAME_PATTERN: Final = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"
ID_RULE: Final = "1-64 of [A-Za-z0-9._:@-]"
# Task and query ids that name routes (/v1/tasks/lease, /v1/queries/batch, ...): a job
# called so could never be read (GET /v1/tasks/lease is the lease route's 405).
RESERVED_JOB_IDS: Final = ("batch", "lease", "redrive", "results", "start")
ARTIFACT_NAME_RULE: Final = "1-128 of [A-Za-z0-9._-], not starting with a dot"

_ID: Final = re.compile(r"[A-Za-z0-9._:@-]{1,64}")
_ARTIFACT_NAME: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def is_id(value: object) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def is_artifact_name(value: object) -> bool:
    return isinstance(value, str) and _ARTIFACT_NAME.fullmatch(value) is not None


KEY_PREFIX: Final = "lg"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key() -> tuple[str, str, str]:
    """A fresh ``(key_id, secret, key)``; the key is what its holder presents."""
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(24)
    return key_id, secret, f"{KEY_PREFIX}_{key_id}_{secret}"


def split_key(key: str) -> tuple[str, str] | None:
    """``lg_<key_id>_<secret>`` → (key_id, secret); None if it is not of that form."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Constant-time comparison of a presented secret with the stored hash."""
    return hmac.compare_digest(hash_secret(secret), stored_hash)
