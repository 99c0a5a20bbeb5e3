"""A real write and commit, to tell whether the storage still takes writes (/health)."""

from __future__ import annotations

from leasegate.storage.connection import transaction
from leasegate.storage.engine import Connection, dialect


def probe_write(conn: Connection) -> None:
    """Rewrite the schema version with its own value: a write that changes nothing
    (SQLite's ``user_version``; PostgreSQL's last ``schema_version`` row)."""
    with transaction(conn):
        if dialect(conn) == "postgresql":
            conn.execute("UPDATE schema_version SET version = version "
                         "WHERE version = (SELECT max(version) FROM schema_version)")
            return
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        conn.execute(f"PRAGMA user_version = {version}")
