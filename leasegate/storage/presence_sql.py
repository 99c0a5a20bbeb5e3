"""SQL of worker presence and the task health report (tables owned by the task actor).

The ``workers`` table's DDL is in ``tasks_sql.SCHEMA`` (migration 3).
"""

from __future__ import annotations

import sqlite3

from leasegate.storage.rows import marks


def in_flight_of(conn: sqlite3.Connection, worker_ids: list[str]) -> list[sqlite3.Row]:
    if not worker_ids:
        return []
    return conn.execute(
        "SELECT lease_owner, task_id FROM tasks WHERE status IN ('leased', 'running', 'stale') "
        f"AND lease_owner IN ({marks(worker_ids)}) ORDER BY created_at, task_id",
        worker_ids,
    ).fetchall()


def seen(conn: sqlite3.Connection, worker_id: str, now: float, *, sites: str | None = None,
         update_sites: bool = False) -> None:
    """Worker presence: upsert ``last_seen_at`` (and the sites filter of a lease call)."""
    conn.execute(
        "INSERT INTO workers (worker_id, first_seen_at, last_seen_at, sites) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (worker_id) DO UPDATE SET "
        "last_seen_at = max(last_seen_at, excluded.last_seen_at), "
        "sites = CASE WHEN ? THEN excluded.sites ELSE sites END",
        (worker_id, now, now, sites, update_sites),
    )


def workers_page(conn: sqlite3.Connection, limit: int, offset: int) -> tuple[int,
                                                                            list[sqlite3.Row]]:
    total = int(conn.execute("SELECT count(*) FROM workers").fetchone()[0])
    rows = conn.execute(
        "SELECT * FROM workers ORDER BY last_seen_at DESC, worker_id LIMIT ? OFFSET ?",
        (limit, offset),
    ).fetchall()
    return total, rows


def online_workers(conn: sqlite3.Connection, offline_after: float,
                   now: float) -> list[sqlite3.Row]:
    """Workers seen within ``offline_after`` (offline once ``now >= last_seen + after``)."""
    return conn.execute(
        "SELECT * FROM workers WHERE last_seen_at + ? > ?", (offline_after, now)
    ).fetchall()


def purge_workers_before(conn: sqlite3.Connection, cutoff: float) -> int:
    """Forget workers not seen since ``cutoff`` that hold no task."""
    cur = conn.execute(
        "DELETE FROM workers WHERE last_seen_at <= ? AND NOT EXISTS (SELECT 1 FROM tasks "
        "WHERE tasks.lease_owner = workers.worker_id "
        "AND tasks.status IN ('leased', 'running', 'stale'))", (cutoff,)
    )
    return cur.rowcount


# ---- health -------------------------------------------------------------------------

def stale_lanes(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT site, account, task_id, stale_at FROM tasks WHERE status = 'stale' "
        "ORDER BY stale_at, site, account"
    ).fetchall()


def queued_by_site(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT site, count(*) AS n FROM tasks WHERE status = 'queued' "
        "GROUP BY site ORDER BY site"
    ).fetchall()
