"""One turn of an actor at a time, across every gateway of one database.

On SQLite a write transaction takes the database's single write lock (``BEGIN
IMMEDIATE``): every turn of every actor runs alone, and each actor's invariants
(idempotent submit, one in flight per lane, fencing, the ledger's holds, device
changes) rest on that. On PostgreSQL several gateways run the same actor at once, each
on its own connection; :func:`lock_turn` makes each actor's turns take turns again: the
first statement of the turn's transaction takes a transaction-scoped advisory lock
named after the actor, released by its COMMIT or ROLLBACK. So the task actor of gateway
A and the task actor of gateway B never interleave, exactly as on SQLite, while the
ledger's turns and the task actor's still run side by side (they write different
tables, and reach each other only by messages).

Waiting for the lock counts against ``lock_timeout`` (SQLite's busy timeout, 5 s): a
turn of another gateway that holds it longer fails this one as a storage failure
(503), as a busy SQLite file would.
"""

from __future__ import annotations

import hashlib

from leasegate.storage.engine import Connection, dialect

_NAMESPACE = b"leasegate.turn:"


def turn_lock_key(actor: str) -> int:
    """The advisory lock key of ``actor``'s turns: a signed 64-bit number derived from
    its name (stable across versions and gateways)."""
    digest = hashlib.blake2b(_NAMESPACE + actor.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_turn(conn: Connection, actor: str) -> None:
    """Inside a transaction: wait until no other gateway runs a turn of ``actor``
    (PostgreSQL); on SQLite the transaction's write lock already does."""
    if dialect(conn) == "postgresql":
        conn.execute("SELECT pg_advisory_xact_lock(?)", (turn_lock_key(actor),))
