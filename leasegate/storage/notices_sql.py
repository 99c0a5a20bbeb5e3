"""Notifications between gateways on one PostgreSQL database (``NOTIFY``).

A writer calls :func:`notify` inside its transaction: PostgreSQL delivers a
notification only if that transaction commits, and only after it did, so a gateway is
never told of work it cannot see yet, nor of work that was rolled back. The listening
side is ``postgres.listener.Listener``. Here, apart from it, so that the writers import
nothing of psycopg.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from leasegate.storage.engine import Connection

CHANNEL: Final = "leasegate"
MAX_PAYLOAD: Final = 7900  # bytes of UTF-8; PostgreSQL refuses a payload of 8000 or more


def notify(conn: Connection, payloads: Sequence[str]) -> None:
    """Send each payload on :data:`CHANNEL`, in one statement, delivered when (and if)
    its transaction commits: the current one, or (outside a transaction) the
    statement's own, at once. Each must be under :data:`MAX_PAYLOAD` bytes of UTF-8."""
    if payloads:
        calls = ", ".join(["pg_notify(?, ?)"] * len(payloads))
        conn.execute(f"SELECT {calls}", [value for payload in payloads
                                          for value in (CHANNEL, payload)])
