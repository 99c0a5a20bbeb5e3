"""SQL helpers every table module shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leasegate.storage.engine import Connection


def marks(values: Sequence[Any]) -> str:
    """``?, ?, ?``: one placeholder per value, for ``IN (...)`` and ``VALUES (...)``."""
    return ", ".join("?" for _ in values)


def insert_new(conn: Connection, table: str, key: str, values: dict[str, Any]) -> bool:
    """Insert a row unless its ``key`` exists; False (nothing written) if it does.

    ``table``, ``key`` and the column names are the caller's constants, never a client's.
    """
    cur = conn.execute(
        f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks(list(values))}) "
        f"ON CONFLICT ({key}) DO NOTHING", tuple(values.values()))
    return cur.rowcount == 1
