"""A real write and commit, to tell whether the storage still takes writes (/health)."""

from __future__ import annotations

import sqlite3

from leasegate.storage.connection import transaction


def probe_write(conn: sqlite3.Connection) -> None:
    """Rewrite ``user_version`` with its own value: a write that changes nothing."""
    with transaction(conn):
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        conn.execute(f"PRAGMA user_version = {version}")
