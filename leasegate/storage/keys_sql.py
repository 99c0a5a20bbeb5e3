"""SQL of the API keys table (owned by the keys actor; the CLI uses it offline)."""

from __future__ import annotations

import json
from typing import Final

from leasegate.ids import hash_secret, new_key
from leasegate.storage.engine import Connection, Row, dialect
from leasegate.storage.notices_sql import notify
from leasegate.storage.turn_locks import lock_scopes

ROLES = ("client", "worker", "admin")

REVOCATIONS: Final = "keys revocations"  # the lock that numbers revocations in order
# What a revocation tells every gateway of a PostgreSQL database (in the notice format
# of ``actors.other_gateways``: from no gateway, so that every one hears it, the one
# that revoked too): look for keys revoked since you last looked.
REVOKED_NOTICE: Final = '{"g":"","a":"keys","t":"*"}'


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
    """Revoke a live key (False: none such), numbered after every earlier revocation;
    on PostgreSQL every gateway is told once this commits."""
    lock_scopes(conn, [REVOCATIONS])  # the CLI and every gateway number them one at a time
    cur = conn.execute(
        "UPDATE api_keys SET revoked_at = ?, revoked_seq = "
        "(SELECT coalesce(max(revoked_seq), 0) + 1 FROM api_keys) "
        "WHERE key_id = ? AND revoked_at IS NULL",
        (now, key_id),
    )
    revoked = cur.rowcount == 1
    if revoked and dialect(conn) == "postgresql":
        notify(conn, [REVOKED_NOTICE])
    return revoked


def revoked_after(conn: Connection, seq: int) -> list[tuple[str, int]]:
    """``(key_id, revoked_seq)`` of the keys revoked after revocation ``seq``, in order."""
    return [(row[0], int(row[1])) for row in conn.execute(
        "SELECT key_id, revoked_seq FROM api_keys WHERE revoked_seq > ? "
        "ORDER BY revoked_seq", (seq,))]


def last_revocation(conn: Connection) -> int:
    """The number of the latest revocation (0: none numbered)."""
    return int(conn.execute("SELECT coalesce(max(revoked_seq), 0) FROM api_keys")
               .fetchone()[0])
