"""Who is serving, and what is stuck: the task actor's worker list and health report.

Workers are seen only through the task channel (lease, start, renew, result),
so a live query loop never hides a dead task loop.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict

from leasegate.actors.pages import Page, Paged
from leasegate.actors.task_views import BlockedLane, TaskHealthReport, WorkerView, worker_view
from leasegate.actors.views import loads
from leasegate.storage import presence_sql as sql


def workers_page(conn: sqlite3.Connection, page: Page, now: float,
                 offline_after: float) -> Paged[WorkerView]:
    total, rows = sql.workers_page(conn, page.limit, page.offset)
    task_ids: dict[str, list[str]] = defaultdict(list)
    for held in sql.in_flight_of(conn, [row["worker_id"] for row in rows]):
        task_ids[held["lease_owner"]].append(held["task_id"])
    items = tuple(worker_view(row, task_ids[row["worker_id"]],
                              now < row["last_seen_at"] + offline_after) for row in rows)
    return Paged(items, total, page.limit, page.offset)


def health(conn: sqlite3.Connection, now: float, offline_after: float) -> TaskHealthReport:
    """Stale tasks and the lanes they block; sites with queued tasks and no online
    worker (a worker with no sites filter serves every site); queue depth by site."""
    queued = {row["site"]: row["n"] for row in sql.queued_by_site(conn)}
    served: set[str] = set()
    serves_all = False
    for worker in sql.online_workers(conn, offline_after, now):
        if worker["sites"] is None:
            serves_all = True
        else:
            served.update(loads(worker["sites"]))
    unserved = () if serves_all else tuple(site for site in queued if site not in served)
    blocked = tuple(BlockedLane(row["site"], row["account"], row["task_id"], row["stale_at"])
                    for row in sql.stale_lanes(conn))
    return TaskHealthReport(len(blocked), blocked, unserved, queued)
