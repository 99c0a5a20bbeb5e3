"""Messages of the keys actor, each followed by its handler: what the HTTP layer, the
server and tests may ask of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import check_choice, check_id, check_ids, check_tenant, check_text
from leasegate.actors.keys import Keys
from leasegate.actors.keys.turn import KEYS, KeysTurn
from leasegate.actors.keys.views import (
    CreatedKey,
    KeyRecord,
    KeyView,
    created_key,
    key_view,
    principal,
)
from leasegate.actors.pages import ListPage, Paged, paged
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.runtime.turn import Turn
from leasegate.errors import InvalidRequest, NotFound
from leasegate.storage import keys_sql as sql
from leasegate.storage.engine import Connection, Row

Role = Literal["client", "worker", "admin"]


def sites_typed(text: str | None) -> tuple[str, ...] | None:
    """The sites of a comma-separated list as people type it (the console's field,
    ``leasegate keys create --sites``); None (every site) when nothing was given. Blanks
    between commas are dropped; a list that names no site (", ,") is refused, as the
    API refuses ``sites: []``: that key could lease nothing."""
    if text is None:
        return None
    sites = tuple(site for part in text.split(",") if (site := part.strip()))
    if not sites:
        raise InvalidRequest(f"sites {text!r} names no site: list them separated by "
                             "commas (a worker key without sites serves every site)")
    return sites


@dataclass(frozen=True)
class CreateKey(Ask[Keys, CreatedKey]):
    """A new key. A client key needs a tenant (never a system account of the ledger:
    ``@world`` and its kind); sites are for worker keys."""

    role: Role
    name: str
    tenant: str | None = None
    sites: tuple[str, ...] | None = None

    def check(self) -> None:
        check_choice("role", self.role, Role)
        check_text("name", self.name, most=128, empty=False)
        check_tenant("tenant", self.tenant, optional=True)
        check_ids("sites", self.sites)
        if self.sites == ():
            raise InvalidRequest("sites must name at least one site (none: every site)")
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
def revoke(turn: KeysTurn, m: RevokeKey) -> KeyView:
    """Revoked, and told to the key's listeners before the reply: a poll it holds on
    this gateway ends before the revoker hears the key is revoked."""
    _row(turn.conn, m.key_id)
    sql.revoke(turn.conn, m.key_id, turn.now)
    row = _row(turn.conn, m.key_id)
    seq = row["revoked_seq"]
    if seq is not None:
        turn.after_commit(lambda: turn.revoked((m.key_id,), seq))
    return key_view(row)


@dataclass(frozen=True)
class CheckRevocations(Ask[Keys, int]):
    """Pass on the keys revoked since the last revocation passed on (by another process:
    ``leasegate keys revoke``, another gateway); how many there were."""


@KEYS.on(CheckRevocations)
def check_revocations(turn: KeysTurn, m: CheckRevocations) -> int:
    found = sql.revoked_after(turn.conn, turn.revocations_seen)
    if found:
        key_ids = tuple(key_id for key_id, _ in found)
        turn.after_commit(lambda: turn.revoked(key_ids, found[-1][1]))
    return len(found)


def _start(turn: KeysTurn) -> None:
    # Keys revoked before this start are refused by their lookup: nothing of them is
    # held here yet.
    turn.revocations_seen = sql.last_revocation(turn.conn)


KEYS.on_start(_start)


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
def create_first(turn: KeysTurn, m: CreateFirstKeys) -> tuple[CreatedKey, ...]:
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
