"""Who is serving, and what is stuck: the workers seen and the health report, each
message followed by its handler.

Workers are seen only through the task channel (lease, start, renew, result),
so a live query loop never hides a dead task loop.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from leasegate.actors.checks import check_page
from leasegate.actors.pages import Page, Paged
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks.ref import Tasks
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.actors.tasks.views import BlockedLane, TaskHealthReport, WorkerView, worker_view
from leasegate.actors.views import loads
from leasegate.errors import RateLimited
from leasegate.storage import presence_sql as sql


@dataclass(frozen=True)
class ListWorkers(Ask[Tasks, Paged[WorkerView]]):
    page: Page = Page()

    def check(self) -> None:
        check_page(self.page)


@TASKS.on(ListWorkers)
def workers_page(turn: TaskTurn, m: ListWorkers) -> Paged[WorkerView]:
    page, conn = m.page, turn.conn
    offline_after = turn.settings.worker_offline_after
    total, rows = sql.workers_page(conn, page.limit, page.offset)
    task_ids: dict[str, list[str]] = defaultdict(list)
    for held in sql.in_flight_of(conn, [row["worker_id"] for row in rows]):
        task_ids[held["lease_owner"]].append(held["task_id"])
    items = tuple(worker_view(row, task_ids[row["worker_id"]],
                              turn.now < row["last_seen_at"] + offline_after) for row in rows)
    return Paged(items, total, page.limit, page.offset)


def admit(turn: TaskTurn, worker_id: str, key_id: str | None) -> None:
    """Bound the worker rows one key creates (worker ids are the caller's to invent).

    A worker already known always gets in. A new one gets in while its key has
    fewer than ``max_workers_per_key`` workers; at the cap, the key's least
    recently seen worker that is offline and holds no task makes room (a fleet
    that restarts under new ids is never locked out). Otherwise 429 (4290), with
    ``Retry-After`` until the key's oldest worker can go offline.
    """
    conn, now, settings = turn.conn, turn.now, turn.settings
    cap = settings.max_workers_per_key
    if key_id is None or cap == 0 or sql.known(conn, worker_id):
        return
    count, oldest_seen = sql.count_of_key(conn, key_id)
    if count < cap:
        return
    offline_after = settings.worker_offline_after
    if sql.forget_one_offline(conn, key_id, now - offline_after):
        return
    wait = (oldest_seen if oldest_seen is not None else now) + offline_after - now
    raise RateLimited(
        f"this key already has {count} workers online or holding tasks "
        f"(max_workers_per_key is {cap}); reuse a worker_id, or retry once one of "
        f"them has been offline for {offline_after:g} s",
        Retry_After=str(max(1, math.ceil(wait))))


@dataclass(frozen=True)
class CheckTaskHealth(Ask[Tasks, TaskHealthReport]):
    """Stale tasks, blocked lanes, unserved sites, queue depth."""


@TASKS.on(CheckTaskHealth)
def health(turn: TaskTurn, m: CheckTaskHealth) -> TaskHealthReport:
    """Stale tasks and the lanes they block; sites with queued tasks and no online
    worker (a worker with no sites filter serves every site); queue depth by site."""
    conn = turn.conn
    queued = {row["site"]: row["n"] for row in sql.queued_by_site(conn)}
    served: set[str] = set()
    serves_all = False
    for worker in sql.online_workers(conn, turn.settings.worker_offline_after, turn.now):
        if worker["sites"] is None:
            serves_all = True
        else:
            served.update(loads(worker["sites"]))
    unserved = () if serves_all else tuple(site for site in queued if site not in served)
    blocked = tuple(BlockedLane(row["site"], row["account"], row["task_id"], row["stale_at"])
                    for row in sql.stale_lanes(conn))
    return TaskHealthReport(len(blocked), blocked, unserved, queued)
