"""SQL of worker presence and the task health report (tables owned by the task actor).

``workers.key_id`` is the key whose lease call last named the worker; the table is in
``sqlite/schema.sql``.
"""

from __future__ import annotations

from leasegate.storage.engine import Connection, Row, Spelled, respelled, spelling
from leasegate.storage.lanes_sql import in_flight
from leasegate.storage.rows import marks

# The upsert names the table's columns as workers.x: PostgreSQL finds a bare name
# ambiguous beside excluded.x (SQLite runs both spellings as one); the larger of two
# values is SQLite's two-argument max(), PostgreSQL's greatest().
_SEEN = respelled(
    "INSERT INTO workers (worker_id, first_seen_at, last_seen_at, task_seen_at, sites, "
    "key_id) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (worker_id) DO UPDATE SET "
    "last_seen_at = max(workers.last_seen_at, excluded.last_seen_at), "
    "task_seen_at = max(coalesce(workers.task_seen_at, 0), excluded.task_seen_at), "
    "sites = CASE WHEN ? THEN excluded.sites ELSE workers.sites END, "
    "key_id = CASE WHEN ? THEN excluded.key_id ELSE workers.key_id END",
    ("max(", "greatest("))
# A sighting on the query channel (told by the query actor): its own time and sites.
_SEEN_ON_QUERIES = respelled(
    "INSERT INTO workers (worker_id, first_seen_at, last_seen_at, query_seen_at, "
    "query_sites, key_id) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (worker_id) DO UPDATE SET "
    "last_seen_at = max(workers.last_seen_at, excluded.last_seen_at), "
    "query_seen_at = max(coalesce(workers.query_seen_at, 0), excluded.query_seen_at), "
    "query_sites = CASE WHEN ? THEN excluded.query_sites ELSE workers.query_sites END, "
    "key_id = coalesce(workers.key_id, excluded.key_id)",
    ("max(", "greatest("))
_HOLDS_NO_TASK = ("NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.lease_owner = workers.worker_id "
                  f"AND {in_flight('tasks.status')})")


def in_flight_of(conn: Connection, worker_ids: list[str]) -> list[Row]:
    if not worker_ids:
        return []
    return conn.execute(
        f"SELECT lease_owner, task_id FROM tasks WHERE {in_flight()} "
        f"AND lease_owner IN ({marks(worker_ids)}) ORDER BY created_at, task_id",
        worker_ids,
    ).fetchall()


def seen(conn: Connection, worker_id: str, now: float, *, sites: str | None = None,
         update_sites: bool = False, key_id: str | None = None) -> None:
    """Worker presence: upsert ``last_seen_at`` (and the sites filter and key of a lease
    call)."""
    conn.execute(_SEEN, (worker_id, now, now, now, sites, key_id, update_sites, update_sites))


def seen_on_queries(conn: Connection, worker_id: str, at: float, *, sites: str | None,
                    update_sites: bool, key_id: str | None) -> None:
    """A sighting on the query channel at ``at`` (and the sites a lease call serves)."""
    conn.execute(_SEEN_ON_QUERIES, (worker_id, at, at, at, sites, key_id, update_sites))


def known(conn: Connection, worker_id: str) -> bool:
    return conn.execute("SELECT 1 FROM workers WHERE worker_id = ?",
                        (worker_id,)).fetchone() is not None


def count_of_key(conn: Connection, key_id: str) -> tuple[int, float | None]:
    """How many workers the key has, and when the least recently seen was last seen."""
    row = conn.execute("SELECT count(*), min(last_seen_at) FROM workers WHERE key_id = ?",
                       (key_id,)).fetchone()
    return int(row[0]), row[1]


def forget_one_offline(conn: Connection, key_id: str, seen_before: float) -> bool:
    """Forget the key's least recently seen worker not seen since ``seen_before`` that
    holds no task; False if there is none."""
    cur = conn.execute(
        "DELETE FROM workers WHERE worker_id = (SELECT worker_id FROM workers "
        f"WHERE key_id = ? AND last_seen_at <= ? AND {_HOLDS_NO_TASK} "
        "ORDER BY last_seen_at, worker_id LIMIT 1)", (key_id, seen_before))
    return cur.rowcount > 0


def workers_page(conn: Connection, limit: int, offset: int) -> tuple[int,
                                                                            list[Row]]:
    total = int(conn.execute("SELECT count(*) FROM workers").fetchone()[0])
    rows = conn.execute(
        "SELECT * FROM workers ORDER BY last_seen_at DESC, worker_id LIMIT ? OFFSET ?",
        (limit, offset),
    ).fetchall()
    return total, rows


def online_workers(conn: Connection, offline_after: float,
                   now: float) -> list[Row]:
    """Workers seen on the task channel within ``offline_after`` (offline once
    ``now >= task_seen_at + after``): a live query loop never hides a dead task loop."""
    return conn.execute(
        "SELECT * FROM workers WHERE task_seen_at + ? > ?", (offline_after, now)
    ).fetchall()


def purge_workers_before(conn: Connection, cutoff: float) -> int:
    """Forget workers not seen since ``cutoff`` that hold no task."""
    cur = conn.execute(
        f"DELETE FROM workers WHERE last_seen_at <= ? AND {_HOLDS_NO_TASK}", (cutoff,))
    return cur.rowcount


# ---- health -------------------------------------------------------------------------

# Sites that no online worker serves: ``served`` is a JSON array of the sites that one does.
_QUEUED = "FROM tasks WHERE status = 'queued'"
_ELSEWHERE = Spelled(" AND site NOT IN (SELECT value FROM json_each(?))",
                     " AND site NOT IN (SELECT jsonb_array_elements_text(?::jsonb))")


def stale_count(conn: Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM tasks WHERE status = 'stale'").fetchone()[0])


def stale_lanes(conn: Connection, limit: int) -> list[Row]:
    """The ``limit`` lanes blocked longest (each by its stale task)."""
    return conn.execute(
        "SELECT site, account, task_id, stale_at FROM tasks WHERE status = 'stale' "
        "ORDER BY stale_at, site, account LIMIT ?", (limit,)
    ).fetchall()


def queued_totals(conn: Connection, served: str | None = None) -> tuple[int, int]:
    """Queued tasks and the number of sites they are on; with ``served``, only those on
    sites outside it."""
    row = conn.execute(f"SELECT count(*), count(DISTINCT site) {_QUEUED}"
                       + ("" if served is None else spelling(conn, _ELSEWHERE)),
                       () if served is None else (served,)).fetchone()
    return int(row[0]), int(row[1])


def queued_sites(conn: Connection, limit: int, offset: int = 0,
                 served: str | None = None) -> list[Row]:
    """Sites by their queued tasks, most first, then by name (``site``, ``n``); with
    ``served``, only sites outside it."""
    return conn.execute(
        f"SELECT site, count(*) AS n {_QUEUED}"
        f"{'' if served is None else spelling(conn, _ELSEWHERE)} "
        "GROUP BY site ORDER BY n DESC, site LIMIT ? OFFSET ?",
        (limit, offset) if served is None else (served, limit, offset),
    ).fetchall()
