"""SQL of the schedules and their fires (owned by the schedules actor).

A schedule is named by its id alone, whatever its tenant: its fires' job ids
(``<schedule_id>@<fire time>``) share the job ids' one namespace, so two tenants'
schedules of one name would make the same job ids. ``next_fire_at`` (wall seconds) is
NULL while the schedule is paused. Gateways claim a schedule's due fires one at a time
without a lock on the actor: :func:`due` skips a schedule another is claiming, and
:func:`advance` moves it on only from the time that was read. A fire is keyed by
(schedule, fire time): two gateways claiming the same fire make one row. The tables
are in ``sqlite/schema.sql``.
"""

from __future__ import annotations

from typing import Any

from leasegate.storage.engine import Connection, Row, skip_locked
from leasegate.storage.rows import marks

FIRES_SHOWN = 20
"""The fires a schedule keeps (and shows): its last ones."""


def get(conn: Connection, schedule_id: str) -> Row | None:
    row: Row | None = conn.execute("SELECT * FROM schedules WHERE schedule_id = ?",
                                   (schedule_id,)).fetchone()
    return row


def count_of(conn: Connection, tenant: str) -> int:
    return int(conn.execute("SELECT count(*) FROM schedules WHERE tenant = ?",
                            (tenant,)).fetchone()[0])


def insert(conn: Connection, fields: dict[str, Any]) -> None:
    names = ", ".join(fields)
    marks = ", ".join("?" for _ in fields)
    conn.execute(f"INSERT INTO schedules ({names}) VALUES ({marks})", tuple(fields.values()))


def update(conn: Connection, schedule_id: str, fields: dict[str, Any]) -> None:
    sets = ", ".join(f"{name} = ?" for name in fields)
    conn.execute(f"UPDATE schedules SET {sets} WHERE schedule_id = ?",
                 (*fields.values(), schedule_id))


def page(conn: Connection, tenant: str | None, limit: int,
         offset: int) -> tuple[int, list[Row]]:
    """``(total, rows)`` of one tenant's schedules (None: everyone's), newest first."""
    where, args = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
    total = int(conn.execute(f"SELECT count(*) FROM schedules {where}", args).fetchone()[0])
    rows = conn.execute(f"SELECT * FROM schedules {where} ORDER BY created_at DESC, "
                        "schedule_id DESC LIMIT ? OFFSET ?", (*args, limit, offset)).fetchall()
    return total, rows


def delete(conn: Connection, schedule_id: str) -> None:
    conn.execute("DELETE FROM schedule_fires WHERE schedule_id = ?", (schedule_id,))
    conn.execute("DELETE FROM schedules WHERE schedule_id = ?", (schedule_id,))


def earliest(conn: Connection) -> float | None:
    """The next fire time of all (on the index ``schedules_due``)."""
    value = conn.execute("SELECT min(next_fire_at) FROM schedules").fetchone()[0]
    return None if value is None else float(value)


def due(conn: Connection, now: float) -> list[Row]:
    """The schedules due by ``now``; on PostgreSQL each locked as read, one another
    gateway is claiming left to it (its commit moves it on)."""
    return conn.execute(skip_locked("SELECT * FROM schedules WHERE next_fire_at <= ? "
                                    "ORDER BY next_fire_at"), (now,)).fetchall()


def advance(conn: Connection, schedule_id: str, was: float, then: float | None) -> bool:
    """Move a schedule's next fire from ``was`` to ``then``; False if it had moved."""
    cur = conn.execute("UPDATE schedules SET next_fire_at = ? WHERE schedule_id = ? "
                       "AND next_fire_at = ?", (then, schedule_id, was))
    return cur.rowcount == 1


def add_fire(conn: Connection, schedule_id: str, fire_at: float, job_id: str,
             now: float) -> bool:
    """A pending fire; False if that fire was made already."""
    cur = conn.execute(
        "INSERT INTO schedule_fires (schedule_id, fire_at, job_id, status, claimed_at) "
        "VALUES (?, ?, ?, 'pending', ?) ON CONFLICT DO NOTHING",
        (schedule_id, fire_at, job_id, now))
    return cur.rowcount == 1


def fire_done(conn: Connection, schedule_id: str, fire_at: float, status: str,
              error: str | None) -> bool:
    """A pending fire's outcome; False if it was recorded already (or is gone)."""
    cur = conn.execute("UPDATE schedule_fires SET status = ?, error = ? WHERE schedule_id = ? "
                       "AND fire_at = ? AND status = 'pending'",
                       (status, error, schedule_id, fire_at))
    return cur.rowcount == 1


def previous_job(conn: Connection, schedule_id: str, fire_at: float) -> str | None:
    """The job of the fire before ``fire_at`` that submitted one (or is submitting)."""
    row = conn.execute("SELECT job_id FROM schedule_fires WHERE schedule_id = ? "
                       "AND fire_at < ? AND status IN ('pending', 'submitted') "
                       "ORDER BY fire_at DESC LIMIT 1", (schedule_id, fire_at)).fetchone()
    return None if row is None else str(row[0])


def fires(conn: Connection, schedule_id: str) -> list[Row]:
    """A schedule's last fires, newest first."""
    return conn.execute("SELECT * FROM schedule_fires WHERE schedule_id = ? "
                        "ORDER BY fire_at DESC LIMIT ?", (schedule_id, FIRES_SHOWN)).fetchall()


def fires_of(conn: Connection, schedule_ids: list[str]) -> dict[str, list[Row]]:
    """The last fires of each of ``schedule_ids`` (a page of them), newest first, in one
    query."""
    if not schedule_ids:
        return {}
    found: dict[str, list[Row]] = {}
    for row in conn.execute(
            "SELECT * FROM (SELECT f.*, row_number() OVER (PARTITION BY f.schedule_id "
            "ORDER BY f.fire_at DESC) AS n FROM schedule_fires f "
            f"WHERE f.schedule_id IN ({marks(schedule_ids)})) AS last_fires WHERE n <= ? "
            "ORDER BY schedule_id, fire_at DESC", (*schedule_ids, FIRES_SHOWN)).fetchall():
        found.setdefault(row["schedule_id"], []).append(row)
    return found


def trim(conn: Connection, schedule_id: str) -> None:
    """Forget a schedule's finished fires older than its last :data:`FIRES_SHOWN`."""
    conn.execute(
        "DELETE FROM schedule_fires WHERE schedule_id = ? AND status <> 'pending' AND "
        "fire_at < (SELECT fire_at FROM schedule_fires WHERE schedule_id = ? "
        "ORDER BY fire_at DESC LIMIT 1 OFFSET ?)", (schedule_id, schedule_id, FIRES_SHOWN - 1))


def pending(conn: Connection, claimed_before: float) -> list[Row]:
    """Fires claimed before ``claimed_before`` whose outcome is not recorded, with what
    their schedule submits, oldest first."""
    return conn.execute(
        "SELECT f.schedule_id, f.fire_at, f.job_id, s.tenant, s.channel, s.template, "
        "s.overlap FROM schedule_fires f JOIN schedules s ON s.schedule_id = f.schedule_id "
        "WHERE f.status = 'pending' AND f.claimed_at < ? ORDER BY f.fire_at",
        (claimed_before,)).fetchall()
