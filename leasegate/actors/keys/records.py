"""Messages of the keys actor, each followed by its handler: what the HTTP layer, the
server and tests may ask of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import check_choice, check_id, check_ids, check_text
from leasegate.actors.keys.ref import Keys
from leasegate.actors.keys.turn import KEYS
from leasegate.actors.keys.views import (
    CreatedKey,
    KeyRecord,
    KeyView,
    created_key,
    key_view,
    principal,
)
from leasegate.actors.lists import ListPage
from leasegate.actors.pages import Paged, paged
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.runtime.turn import Turn
from leasegate.errors import InvalidRequest, NotFound
from leasegate.storage import keys_sql as sql
from leasegate.storage.engine import Connection, Row

Role = Literal["client", "worker", "admin"]


@dataclass(frozen=True)
class CreateKey(Ask[Keys, CreatedKey]):
    """A new key. A client key needs a tenant; sites are for worker keys."""

    role: Role
    name: str
    tenant: str | None = None
    sites: tuple[str, ...] | None = None

    def check(self) -> None:
        check_choice("role", self.role, Role)
        check_text("name", self.name, most=128, empty=False)
        check_id("tenant", self.tenant, optional=True)
        check_ids("sites", self.sites)
        if self.role == "client" and self.tenant is None:
            raise InvalidRequest("a client key needs a tenant")
        if self.role != "worker" and self.sites is not None:
            raise InvalidRequest("sites are for worker keys")


@KEYS.on(CreateKey)
def create(turn: Turn, m: CreateKey) -> CreatedKey:
    sites = list(m.sites) if m.sites is not None else None
    key_id, key = sql.create(turn.conn, role=m.role, name=m.name, tenant=m.tenant,
                             sites=sites, now=turn.now)
    return created_key(_row(turn.conn, key_id), key)


@dataclass(frozen=True)
class LookupKey(Ask[Keys, KeyRecord | None]):
    """The key with this id (revoked ones too), or None."""

    key_id: str

    def check(self) -> None:
        check_text("key_id", self.key_id, most=64, empty=False)


@KEYS.on(LookupKey)
def lookup(turn: Turn, m: LookupKey) -> KeyRecord | None:
    row = sql.get(turn.conn, m.key_id)
    if row is None:
        return None
    return KeyRecord(principal(row), row["secret_hash"], revoked=row["revoked_at"] is not None)


@dataclass(frozen=True)
class ListKeys(ListPage[Keys, KeyView]):
    """Every key, newest first."""


@KEYS.on(ListKeys)
def list_keys(turn: Turn, m: ListKeys) -> Paged[KeyView]:
    return paged(sql.page(turn.conn, m.page.limit, m.page.offset), key_view, m.page)


@dataclass(frozen=True)
class RevokeKey(Ask[Keys, KeyView]):
    key_id: str

    def check(self) -> None:
        check_id("key_id", self.key_id)


@KEYS.on(RevokeKey)
def revoke(turn: Turn, m: RevokeKey) -> KeyView:
    _row(turn.conn, m.key_id)
    sql.revoke(turn.conn, m.key_id, turn.now)
    return key_view(_row(turn.conn, m.key_id))


@dataclass(frozen=True)
class CountKeys(Ask[Keys, int]):
    """The number of keys ever created (revoked ones too)."""


@KEYS.on(CountKeys)
def count(turn: Turn, m: CountKeys) -> int:
    return sql.count_all(turn.conn)


@dataclass(frozen=True)
class CreateFirstKeys(Ask[Keys, tuple[CreatedKey, ...]]):
    """Create these keys if no key was ever created, else none (in one turn: of
    several gateways starting together on a fresh database, one creates them)."""

    keys: tuple[CreateKey, ...]

    def check(self) -> None:
        if not isinstance(self.keys, tuple) or not all(
                isinstance(key, CreateKey) for key in self.keys):
            raise InvalidRequest("keys must be a tuple of CreateKey")
        for key in self.keys:
            key.check()


@KEYS.on(CreateFirstKeys)
def create_first(turn: Turn, m: CreateFirstKeys) -> tuple[CreatedKey, ...]:
    if sql.count_all(turn.conn):
        return ()
    return tuple(create(turn, key) for key in m.keys)


# Gateways starting together on a fresh database: one creates the first keys.
KEYS.locks(CreateFirstKeys, lambda m: ("keys first",))


def _row(conn: Connection, key_id: str) -> Row:
    row = sql.get(conn, key_id)
    if row is None:
        raise NotFound(f"no key {key_id}")
    return row
