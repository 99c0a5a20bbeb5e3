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
    """Send each payload on :data:`CHANNEL`, delivered when (and if) the current
    transaction commits. Each must be under :data:`MAX_PAYLOAD` bytes of UTF-8. On
    leasegate's own PostgreSQL connection, sent with the COMMIT (no round trip of its
    own)."""
    with_commit = getattr(conn, "with_commit", None)
    for payload in payloads:
        if with_commit is not None:
            with_commit("pg_notify", CHANNEL, payload)
        else:
            conn.execute("SELECT pg_notify(?, ?)", (CHANNEL, payload))
