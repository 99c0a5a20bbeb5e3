"""A failed job's error as the worker raised it: the exception's type and traceback,
kept beside the code and message its result already stored (``tasks``/``queries``)."""

from __future__ import annotations

from leasegate.storage.engine import Connection

_TABLES = {"tasks": "task_id", "queries": "query_id"}


def record_detail(conn: Connection, table: str, job_id: str, error_type: str | None,
                  traceback: str | None) -> None:
    """Keep the type and traceback of the error a job just ended with."""
    id_column = _TABLES[table]  # the caller's constant, never a client's text
    conn.execute(f"UPDATE {table} SET error_type = ?, error_traceback = ? "
                 f"WHERE {id_column} = ?", (error_type, traceback, job_id))
