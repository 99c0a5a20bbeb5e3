"""SQL of the artifacts table (owned by the task actor: artifacts belong to tasks).

Rows go with their task: purging a task deletes its rows (ON DELETE CASCADE);
the files themselves are deleted off the actor's message path.
"""

from __future__ import annotations

from leasegate.storage.engine import Connection, Row


def put(conn: Connection, task_id: str, name: str, size: int, sha256: str,
        now: float) -> None:
    """A re-upload under the same name replaces the earlier one."""
    conn.execute(
        "INSERT INTO artifacts (task_id, name, size, sha256, created_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (task_id, name) DO UPDATE SET size = excluded.size, "
        "sha256 = excluded.sha256, created_at = excluded.created_at",
        (task_id, name, size, sha256, now),
    )


def of_task(conn: Connection, task_id: str) -> list[Row]:
    return conn.execute(
        "SELECT * FROM artifacts WHERE task_id = ? ORDER BY name", (task_id,)
    ).fetchall()


def get(conn: Connection, task_id: str, name: str) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT * FROM artifacts WHERE task_id = ? AND name = ?", (task_id, name)
    ).fetchone()
    return row


def usage_besides(conn: Connection, task_id: str, name: str) -> tuple[int, int]:
    """How many artifacts the task has, and their bytes, leaving out ``name`` (the one
    an upload under that name would replace)."""
    row = conn.execute(
        "SELECT count(*), coalesce(sum(size), 0) FROM artifacts WHERE task_id = ? AND name != ?",
        (task_id, name),
    ).fetchone()
    return int(row[0]), int(row[1])
