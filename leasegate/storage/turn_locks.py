"""Narrow locks across the gateways of one database, each named after what it guards.

On SQLite a write transaction takes the database's single write lock (``BEGIN
IMMEDIATE``): every turn of every actor runs alone. On PostgreSQL several gateways run
the same actor at once, each on its own connection, and nothing serializes a whole
actor: transitions are conditional updates, leases skip rows another gateway is taking
(``FOR UPDATE SKIP LOCKED``), submits rest on the primary key. Where a promise needs a
check and a write to be one (an account's balance and its hold, a device's state, the
workers a key may create), the handler names the thing it guards ("account acme"), and
:func:`lock_scopes` takes a transaction-scoped advisory lock per name, a 64-bit key
hashed from it, released by the turn's COMMIT or ROLLBACK: only turns about the same
account, device or key wait for each other.

The locks a turn's messages declare (``Handlers.locks``) are taken at once, first in
the turn, in key order, so two turns never wait for each other in a cycle. Waiting
counts against ``lock_timeout`` (SQLite's busy timeout, 5 s): a turn blocked longer
fails as a storage failure (503), as a busy SQLite file would.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from leasegate.storage.engine import Connection, dialect

_NAMESPACE = b"leasegate.turn:"


def scope_key(scope: str) -> int:
    """The advisory lock key of ``scope``: a signed 64-bit number derived from its name
    (stable across versions and gateways)."""
    digest = hashlib.blake2b(_NAMESPACE + scope.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class Shared(str):
    """A scope taken shared: it waits only for a holder of the same scope taken
    exclusive (many submits beside each other; a purge waits for them, and they for it)."""


def lock_scopes(conn: Connection, scopes: Iterable[str]) -> None:
    """Inside a transaction on PostgreSQL: wait until no other transaction holds the lock
    of any of ``scopes`` (a :class:`Shared` one: in exclusive mode), then hold them to the
    end of this one; one statement, the keys in order. On SQLite the transaction's write
    lock already does it."""
    if dialect(conn) != "postgresql":
        return
    exclusive: dict[int, bool] = {}
    for name in scopes:
        key = scope_key(name)
        exclusive[key] = exclusive.get(key, False) or not isinstance(name, Shared)
    if not exclusive:
        return
    keys = sorted(exclusive)
    calls = ", ".join("pg_advisory_xact_lock(?)" if exclusive[key] else
                      "pg_advisory_xact_lock_shared(?)" for key in keys)
    conn.execute(f"SELECT {calls}", keys)
