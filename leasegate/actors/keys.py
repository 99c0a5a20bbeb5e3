"""The keys actor: API keys and the principals they stand for.

Secrets are never stored; only their SHA-256. A presented key is found by its
public ``key_id`` and its secret compared in constant time.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from leasegate.actors.common import Page
from leasegate.actors.runtime import Actor
from leasegate.clock import Clock, iso
from leasegate.errors import NotFound
from leasegate.storage import keys_sql as sql
from leasegate.storage.connection import Database


@dataclass(frozen=True)
class Principal:
    """Who is calling: a key's role, and what it is bound to."""

    key_id: str
    role: str
    name: str
    tenant: str | None = None
    sites: tuple[str, ...] | None = None  # None: every site


@dataclass(frozen=True)
class CreateKey:
    role: str
    name: str
    tenant: str | None = None
    sites: tuple[str, ...] | None = None


@dataclass(frozen=True)
class LookupKey:
    """→ the live :class:`Principal` and its secret hash, or None."""

    key_id: str


@dataclass(frozen=True)
class ListKeys:
    page: Page = Page()


@dataclass(frozen=True)
class RevokeKey:
    key_id: str


@dataclass(frozen=True)
class CountKeys:
    """→ the number of keys ever created (revoked ones too)."""


class KeyStore(Actor):
    name = "keys"

    def __init__(self, db: Database, clock: Clock) -> None:
        super().__init__(db, clock, mailbox_size=1024)

    def handle(self, conn: sqlite3.Connection, message: Any) -> Any:
        match message:
            case CreateKey():
                sites = list(message.sites) if message.sites is not None else None
                created = sql.create(conn, role=message.role, name=message.name,
                                     tenant=message.tenant, sites=sites, now=self.now)
                row = sql.get(conn, created["key_id"])
                assert row is not None
                return {**render(row), "key": created["key"]}
            case LookupKey():
                row = sql.get(conn, message.key_id)
                if row is None or row["revoked_at"] is not None:
                    return None
                return principal(row), row["secret_hash"]
            case ListKeys():
                total = conn.execute("SELECT count(*) FROM api_keys").fetchone()[0]
                rows = conn.execute(
                    "SELECT * FROM api_keys ORDER BY created_at DESC, rowid DESC "
                    "LIMIT ? OFFSET ?", (message.page.limit, message.page.offset)).fetchall()
                return {"items": [render(r) for r in rows], "total": total,
                        "limit": message.page.limit, "offset": message.page.offset}
            case RevokeKey():
                row = sql.get(conn, message.key_id)
                if row is None:
                    raise NotFound(f"no key {message.key_id}")
                sql.revoke(conn, message.key_id, self.now)
                row = sql.get(conn, message.key_id)
                assert row is not None
                return render(row)
            case CountKeys():
                return sql.count_all(conn)
        raise TypeError(f"keys: unknown message {message!r}")


def principal(row: sqlite3.Row) -> Principal:
    sites = None if row["sites"] is None else tuple(json.loads(row["sites"]))
    return Principal(row["key_id"], row["role"], row["name"], row["tenant"], sites)


def render(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "key_id": row["key_id"],
        "role": row["role"],
        "name": row["name"],
        "tenant": row["tenant"],
        "sites": None if row["sites"] is None else json.loads(row["sites"]),
        "created_at": iso(row["created_at"]),
        "revoked_at": iso(row["revoked_at"]),
    }
