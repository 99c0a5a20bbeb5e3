"""Who is serving, and what is stuck: the task actor's worker list and health report.

Workers are seen only through the task channel (lease, start, renew, result),
so a live query loop never hides a dead task loop.
"""

from __future__ import annotations

import math
import sqlite3
from collections import defaultdict

from leasegate.actors.pages import Page, Paged
from leasegate.actors.task_messages import LeaseTasks
from leasegate.actors.task_views import BlockedLane, TaskHealthReport, WorkerView, worker_view
from leasegate.actors.views import loads
from leasegate.errors import RateLimited
from leasegate.settings import Settings
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


def admit(conn: sqlite3.Connection, m: LeaseTasks, now: float, settings: Settings) -> None:
    """Bound the worker rows one key creates (worker ids are the caller's to invent).

    A worker already known always gets in. A new one gets in while its key has
    fewer than ``max_workers_per_key`` workers; at the cap, the key's least
    recently seen worker that is offline and holds no task makes room (a fleet
    that restarts under new ids is never locked out). Otherwise 429 (4290), with
    ``Retry-After`` until the key's oldest worker can go offline.
    """
    cap = settings.max_workers_per_key
    if m.key_id is None or cap == 0 or sql.known(conn, m.worker_id):
        return
    count, oldest_seen = sql.count_of_key(conn, m.key_id)
    if count < cap:
        return
    offline_after = settings.worker_offline_after
    if sql.forget_one_offline(conn, m.key_id, now - offline_after):
        return
    wait = (oldest_seen if oldest_seen is not None else now) + offline_after - now
    raise RateLimited(
        f"this key already has {count} workers online or holding tasks "
        f"(max_workers_per_key is {cap}); reuse a worker_id, or retry once one of "
        f"them has been offline for {offline_after:g} s",
        Retry_After=str(max(1, math.ceil(wait))))


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
