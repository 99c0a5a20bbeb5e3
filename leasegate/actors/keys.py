"""The keys actor: API keys and the principals they stand for.

Secrets are never stored; only their SHA-256 (``leasegate.keyformat``). A
presented key is found by its public ``key_id`` and its secret compared in
constant time by the HTTP layer.
"""

from __future__ import annotations

import sqlite3

from leasegate.actors.key_messages import CountKeys, CreateKey, ListKeys, LookupKey, RevokeKey
from leasegate.actors.key_views import KeyRecord, created_key, key_view, principal
from leasegate.actors.mailbox import Ask, Tell
from leasegate.actors.pages import Paged
from leasegate.actors.runtime import Actor
from leasegate.clock import Clock
from leasegate.errors import InvalidRequest, NotFound
from leasegate.storage import keys_sql as sql
from leasegate.storage.connection import Database


class KeyStore(Actor):
    name = "keys"

    def __init__(self, db: Database, clock: Clock) -> None:
        super().__init__(db, clock, mailbox_size=1024)

    def handle(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        match message:
            case CreateKey():
                sites = list(message.sites) if message.sites is not None else None
                key_id, key = sql.create(conn, role=message.role, name=message.name,
                                         tenant=message.tenant, sites=sites, now=self.now)
                return created_key(self._row(conn, key_id), key)
            case LookupKey():
                row = sql.get(conn, message.key_id)
                if row is None:
                    return None
                return KeyRecord(principal(row), row["secret_hash"],
                                 revoked=row["revoked_at"] is not None)
            case ListKeys():
                page = message.page
                total, rows = sql.page(conn, page.limit, page.offset)
                return Paged(tuple(key_view(r) for r in rows), total, page.limit, page.offset)
            case RevokeKey():
                self._row(conn, message.key_id)
                sql.revoke(conn, message.key_id, self.now)
                return key_view(self._row(conn, message.key_id))
            case CountKeys():
                return sql.count_all(conn)
        raise InvalidRequest(f"keys: not a keys message: {type(message).__name__}")

    @staticmethod
    def _row(conn: sqlite3.Connection, key_id: str) -> sqlite3.Row:
        row = sql.get(conn, key_id)
        if row is None:
            raise NotFound(f"no key {key_id}")
        return row
