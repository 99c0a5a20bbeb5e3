"""SQL of the devices table (owned by the device tracker actor).

A device is named by its tenant and its id: tenant A's ``d1`` is not tenant
B's. ``state`` is online, away or gone; ``version`` counts its state changes
and ``pending`` is 1 while the task actor has not confirmed the action of the
current state (pause, resume, cancel), so that a crash between the two is
repaired on restart. Times are wall seconds (REAL).

The tracker also reads the tasks table (a read-only SELECT on the same file):
how many live tasks a device has decides whether it may be evicted. The
task actor finds a device's tasks with :func:`tasks_of` (on the index
``tasks_device``). The tables are in ``sqlite/schema.sql``.
"""

from __future__ import annotations

from leasegate.storage.engine import Connection, Row, respelled, skip_locked

LIVE = ("queued", "leased", "running", "paused", "stale")
"""A task in one of these states is not finished: its device is not evicted."""
_LIVE = ", ".join(f"'{s}'" for s in LIVE)
# The larger of two values: SQLite's two-argument max(), PostgreSQL's greatest().
_LARGER = ("max(", "greatest(")
_SEEN = respelled("UPDATE devices SET last_seen_at = max(last_seen_at, ?) "
                  "WHERE tenant = ? AND device_id = ?", _LARGER)
_CHANGE = respelled(
    "UPDATE devices SET state = ?, changed_at = ?, version = version + 1, pending = 1, "
    "last_seen_at = max(last_seen_at, coalesce(?, last_seen_at)) "
    "WHERE tenant = ? AND device_id = ? AND state = ? RETURNING version", _LARGER)
_HAS_NO_LIVE_TASK = (
    "NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.tenant = devices.tenant "
    f"AND tasks.device_id = devices.device_id AND tasks.status IN ({_LIVE}))")


def get(conn: Connection, tenant: str, device_id: str) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT * FROM devices WHERE tenant = ? AND device_id = ?", (tenant, device_id)
    ).fetchone()
    return row


_TO_CHANGE = respelled("SELECT * FROM devices WHERE tenant = ? AND device_id = ?",
                       ("device_id = ?", "device_id = ? FOR UPDATE"))


def get_to_change(conn: Connection, tenant: str, device_id: str) -> Row | None:
    """:func:`get` of a device this transaction may change: on PostgreSQL its row is
    locked to the commit, so another gateway's change waits (and its timer skips it)."""
    row: Row | None = conn.execute(_TO_CHANGE, (tenant, device_id)).fetchone()
    return row


def count(conn: Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM devices").fetchone()[0])


def insert(conn: Connection, tenant: str, device_id: str, now: float) -> None:
    conn.execute(
        "INSERT INTO devices (tenant, device_id, state, first_seen_at, last_seen_at, "
        "changed_at) VALUES (?, ?, 'online', ?, ?, ?)", (tenant, device_id, now, now, now))


def seen(conn: Connection, tenant: str, device_id: str, now: float) -> None:
    """A sighting of a device that is online already."""
    conn.execute(_SEEN, (now, tenant, device_id))


def change(conn: Connection, tenant: str, device_id: str, from_state: str,
           to_state: str, now: float, *, seen_at: float | None = None) -> int | None:
    """``from_state`` → ``to_state`` with its action pending; the new version, or None
    if the row was not in ``from_state``."""
    row = conn.execute(_CHANGE, (to_state, now, seen_at, tenant, device_id,
                                 from_state)).fetchone()
    return None if row is None else int(row[0])


def acted(conn: Connection, tenant: str, device_id: str, version: int) -> bool:
    """The task actor applied the action of ``version``: nothing pending any more."""
    cur = conn.execute("UPDATE devices SET pending = 0 WHERE tenant = ? AND device_id = ? "
                       "AND version = ? AND pending = 1", (tenant, device_id, version))
    return cur.rowcount == 1


def pending(conn: Connection, changed_before: float) -> list[Row]:
    """Devices whose current action is not confirmed, changed before ``changed_before``."""
    return conn.execute(
        "SELECT tenant, device_id, state, version FROM devices WHERE pending = 1 "
        "AND changed_at < ? ORDER BY changed_at", (changed_before,)).fetchall()


def silent(conn: Connection, state: str, seen_before: float) -> list[Row]:
    """Devices in ``state`` last seen strictly before ``seen_before``."""
    return conn.execute(skip_locked(
        "SELECT tenant, device_id, last_seen_at FROM devices "
        "WHERE state = ? AND last_seen_at < ? ORDER BY last_seen_at"),
        (state, seen_before)).fetchall()


def least_seen(conn: Connection, state: str) -> float | None:
    row = conn.execute("SELECT min(last_seen_at) FROM devices WHERE state = ?",
                       (state,)).fetchone()
    return None if row[0] is None else float(row[0])


def evict_one(conn: Connection) -> Row | None:
    """Forget the least recently seen device that has no live task; None if none can go."""
    row: Row | None = conn.execute(
        "DELETE FROM devices WHERE (tenant, device_id) = (SELECT tenant, device_id "
        f"FROM devices WHERE {_HAS_NO_LIVE_TASK} ORDER BY last_seen_at, tenant, device_id "
        "LIMIT 1) RETURNING tenant, device_id").fetchone()
    return row


def page(conn: Connection, tenant: str | None, limit: int,
         offset: int) -> tuple[int, list[Row]]:
    """Devices, most recently seen first (``tenant`` None: every tenant), each with
    ``live_tasks``, its unfinished tasks, counted in the same statement."""
    clause, args = ("WHERE tenant = ?", [tenant]) if tenant is not None else ("", [])
    total = int(conn.execute(f"SELECT count(*) FROM devices {clause}", args).fetchone()[0])
    rows = conn.execute(
        "SELECT devices.*, (SELECT count(*) FROM tasks WHERE tasks.tenant = devices.tenant "
        f"AND tasks.device_id = devices.device_id AND tasks.status IN ({_LIVE})) AS live_tasks "
        f"FROM devices {clause} ORDER BY last_seen_at DESC, tenant, device_id "
        "LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
    return total, rows


def by_state(conn: Connection) -> dict[str, int]:
    return {row[0]: int(row[1]) for row in
            conn.execute("SELECT state, count(*) FROM devices GROUP BY state")}


# ---- for the task actor --------------------------------------------------------------

def tasks_of(conn: Connection, tenant: str, device_id: str,
             statuses: tuple[str, ...]) -> list[Row]:
    """The device's tasks in ``statuses``, oldest first."""
    marks = ", ".join("?" for _ in statuses)
    return conn.execute(
        f"SELECT * FROM tasks WHERE tenant = ? AND device_id = ? AND status IN ({marks}) "
        "ORDER BY created_at, task_id", (tenant, device_id, *statuses)).fetchall()
