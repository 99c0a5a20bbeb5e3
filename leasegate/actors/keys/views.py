"""Replies of the keys actor, built from its rows; rendered to JSON at the HTTP edge."""

from __future__ import annotations

import json
from dataclasses import dataclass

from leasegate.actors.views import Instant
from leasegate.storage.engine import Row


@dataclass(frozen=True)
class Principal:
    """Who is calling: a key's role, and what it is bound to."""

    key_id: str
    role: str
    name: str
    tenant: str | None = None
    sites: tuple[str, ...] | None = None  # None: every site


@dataclass(frozen=True)
class KeyRecord:
    """A key as the authenticator needs it: who it stands for, and its secret's hash."""

    principal: Principal
    secret_hash: str
    revoked: bool


@dataclass(frozen=True)
class KeyView:
    """A key without its secret."""

    key_id: str
    role: str
    name: str
    tenant: str | None
    sites: tuple[str, ...] | None
    created_at: Instant
    revoked_at: Instant | None


@dataclass(frozen=True)
class CreatedKey(KeyView):
    key: str  # the secret, shown once


def _sites(row: Row) -> tuple[str, ...] | None:
    return None if row["sites"] is None else tuple(json.loads(row["sites"]))


def principal(row: Row) -> Principal:
    return Principal(row["key_id"], row["role"], row["name"], row["tenant"], _sites(row))


def key_view(row: Row) -> KeyView:
    return KeyView(row["key_id"], row["role"], row["name"], row["tenant"], _sites(row),
                   row["created_at"], row["revoked_at"])


def created_key(row: Row, key: str) -> CreatedKey:
    return CreatedKey(row["key_id"], row["role"], row["name"], row["tenant"], _sites(row),
                      row["created_at"], row["revoked_at"], key)
