"""One page of a table, newest first, with the total its filters match."""

from __future__ import annotations

from typing import Any

from leasegate.storage.engine import Connection, Row


def page_rows(conn: Connection, table: str, filters: dict[str, Any], limit: int,
              offset: int) -> tuple[int, list[Row]]:
    """``(total, rows)`` for ``filters`` (``None`` values are off), newest first.

    ``table`` and the filter names are the caller's constants, never a client's.
    """
    where = [f"{column} = ?" for column, value in filters.items() if value is not None]
    args = [value for value in filters.values() if value is not None]
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    total = conn.execute(f"SELECT count(*) FROM {table}{clause}", args).fetchone()[0]
    rows = conn.execute(
        f"SELECT * FROM {table}{clause} ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?",
        [*args, limit, offset],
    ).fetchall()
    return int(total), rows
