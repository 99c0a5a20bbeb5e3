"""SQL of the API keys table (owned by the keys actor; the CLI uses it offline)."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
from typing import Any

SCHEMA = """
CREATE TABLE api_keys (
    key_id      TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('client', 'worker', 'admin')),
    name        TEXT NOT NULL,
    tenant      TEXT,
    sites       TEXT,
    created_at  REAL NOT NULL,
    revoked_at  REAL
);
"""

ROLES = ("client", "worker", "admin")
KEY_PREFIX = "lg"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """``lg_<key_id>_<secret>`` → (key_id, secret); None if it is not of that form."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Constant-time comparison of a presented secret with the stored hash."""
    return hmac.compare_digest(hash_secret(secret), stored_hash)


def create(conn: sqlite3.Connection, *, role: str, name: str, tenant: str | None,
           sites: list[str] | None, now: float) -> dict[str, Any]:
    """Insert a new key; the only moment its secret exists outside the caller."""
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(24)
    conn.execute(
        "INSERT INTO api_keys (key_id, secret_hash, role, name, tenant, sites, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (key_id, hash_secret(secret), role, name, tenant,
         None if sites is None else json.dumps(sites), now),
    )
    return {"key_id": key_id, "key": f"{KEY_PREFIX}_{key_id}_{secret}"}


def get(conn: sqlite3.Connection, key_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM api_keys WHERE key_id = ?", (key_id,)
    ).fetchone()
    return row


def count_all(conn: sqlite3.Connection) -> int:
    """Keys ever created, revoked ones included."""
    return int(conn.execute("SELECT count(*) FROM api_keys").fetchone()[0])


def revoke(conn: sqlite3.Connection, key_id: str, now: float) -> bool:
    cur = conn.execute(
        "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
        (now, key_id),
    )
    return cur.rowcount == 1
