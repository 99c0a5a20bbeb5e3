"""SQL of the API keys table (owned by the keys actor; the CLI uses it offline)."""

from __future__ import annotations

import json

from leasegate.keyformat import hash_secret, new_key
from leasegate.storage.engine import Connection, Row

ROLES = ("client", "worker", "admin")


def create(conn: Connection, *, role: str, name: str, tenant: str | None,
           sites: list[str] | None, now: float) -> tuple[str, str]:
    """Insert a new key; returns ``(key_id, key)``: the only moment its secret exists
    outside the caller."""
    key_id, secret, key = new_key()
    conn.execute(
        "INSERT INTO api_keys (key_id, secret_hash, role, name, tenant, sites, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (key_id, hash_secret(secret), role, name, tenant,
         None if sites is None else json.dumps(sites), now),
    )
    return key_id, key


def page(conn: Connection, limit: int, offset: int) -> tuple[int, list[Row]]:
    """``(total, rows)``, newest first."""
    total = int(conn.execute("SELECT count(*) FROM api_keys").fetchone()[0])
    rows = conn.execute("SELECT * FROM api_keys ORDER BY created_at DESC, rowid DESC "
                        "LIMIT ? OFFSET ?", (limit, offset)).fetchall()
    return total, rows


def get(conn: Connection, key_id: str) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT * FROM api_keys WHERE key_id = ?", (key_id,)
    ).fetchone()
    return row


def count_all(conn: Connection) -> int:
    """Keys ever created, revoked ones included."""
    return int(conn.execute("SELECT count(*) FROM api_keys").fetchone()[0])


def revoke(conn: Connection, key_id: str, now: float) -> bool:
    cur = conn.execute(
        "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
        (now, key_id),
    )
    return cur.rowcount == 1
