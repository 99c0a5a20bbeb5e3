"""API keys on the wire and at rest: ``lg_<key_id>_<secret>``, stored as a hash.

Shared by the HTTP layer (which checks presented keys) and the storage layer
(which creates them); it depends on nothing of either::

    key_id, secret, key = new_key()
    stored = hash_secret(secret)                 # only this is kept
    split_key(key)                               # (key_id, secret)
    secret_matches(secret, stored)               # True, in constant time
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final

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
