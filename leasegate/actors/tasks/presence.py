"""Who is serving, and what is stuck: the workers seen, the health report and the
sites with queued tasks, each message followed by its handler.

Workers are seen on the task channel (lease, start, renew, result) and, told by the
query actor, on the query channel (lease calls): each channel's last sighting is kept
apart, so a live query loop never hides a dead task loop.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from dataclasses import dataclass

from leasegate.actors.checks import check_flag, check_int
from leasegate.actors.pages import MAX_LIMIT, ListPage, Page, Paged
from leasegate.actors.payloads import canonical_json
from leasegate.actors.queue.leasing import SeenOnQueries
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.actors.tasks.views import (
    BlockedLane,
    SiteQueue,
    TaskHealthReport,
    WorkerView,
    worker_view,
)
from leasegate.actors.views import loads
from leasegate.errors import RateLimited
from leasegate.storage import presence_sql as sql
from leasegate.storage.engine import Connection
from leasegate.storage.turn_locks import lock_scopes


@dataclass(frozen=True)
class ListWorkers(ListPage[Tasks, WorkerView]):
    """Every worker, the last seen first, with the tasks it holds (online: seen
    within ``worker_offline_after``)."""


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
    # A new worker: across gateways, the count and the room made for it are one per key.
    lock_scopes(conn, [f"workers of key {key_id}"])
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


@TASKS.on(SeenOnQueries)
def seen_on_queries(turn: TaskTurn, m: SeenOnQueries) -> None:
    """Workers the query actor saw: recorded as seen on queries, within the same bound
    on workers per key as a task lease call (one past it is not recorded)."""
    for seen in m.sightings:
        try:
            admit(turn, seen.worker_id, seen.key_id)
        except RateLimited:
            continue
        sites = None if seen.sites is None else canonical_json(list(seen.sites))
        sql.seen_on_queries(turn.conn, seen.worker_id, seen.at, sites=sites,
                            update_sites=True, key_id=seen.key_id)


@dataclass(frozen=True)
class CheckTaskHealth(Ask[Tasks, TaskHealthReport]):
    """Stale tasks, blocked lanes, unserved sites, queue depth; ``top`` lanes and sites
    listed (0: counts only)."""

    top: int = 0

    def check(self) -> None:
        check_int("top", self.top, 0, MAX_LIMIT)


@TASKS.on(CheckTaskHealth)
def health(turn: TaskTurn, m: CheckTaskHealth) -> TaskHealthReport:
    """Stale tasks and the ``top`` lanes they block longest; queued tasks and their
    sites, those no online worker serves (a worker with no sites filter serves every
    site), and the ``top`` of each by queued tasks. Counted in full, listed short."""
    conn, top = turn.conn, m.top
    served = served_sites(turn)
    queued, sites = sql.queued_totals(conn)
    unserved = _count_unserved(conn, served, sites)
    report = TaskHealthReport(sql.stale_count(conn), (), queued, sites, unserved, (), ())
    if not top:
        return report
    return dataclasses.replace(
        report,
        blocked_lanes=tuple(BlockedLane(row["site"], row["account"], row["task_id"],
                                        row["stale_at"]) for row in sql.stale_lanes(conn, top)),
        busiest=_site_queues(conn, Page(top), served, unserved_only=False),
        unserved=_site_queues(conn, Page(top), served, unserved_only=True) if unserved else ())


@dataclass(frozen=True)
class ListSites(ListPage[Tasks, SiteQueue]):
    """Sites with queued tasks, most queued first (then by name); ``unserved``: only
    those no online worker serves."""

    unserved: bool = False

    def check(self) -> None:
        super().check()
        check_flag("unserved", self.unserved)


@TASKS.on(ListSites)
def sites_page(turn: TaskTurn, m: ListSites) -> Paged[SiteQueue]:
    """Sites with queued tasks, most first."""
    conn = turn.conn
    served = served_sites(turn)
    total = sql.queued_totals(conn)[1]
    if m.unserved:
        total = _count_unserved(conn, served, total)
    items = _site_queues(conn, m.page, served, unserved_only=m.unserved) if total else ()
    return Paged(items, total, m.page.limit, m.page.offset)


def served_sites(turn: TaskTurn) -> frozenset[str] | None:
    """The sites an online worker serves; None when one serves every site (it has no
    sites filter)."""
    served: set[str] = set()
    for worker in sql.online_workers(turn.conn, turn.settings.worker_offline_after, turn.now):
        if worker["sites"] is None:
            return None
        served.update(loads(worker["sites"]))
    return frozenset(served)


def _outside(served: frozenset[str]) -> str:
    return json.dumps(sorted(served))


def _count_unserved(conn: Connection, served: frozenset[str] | None, sites: int) -> int:
    """Of the ``sites`` with queued tasks, how many no online worker serves."""
    if served is None:
        return 0
    return sql.queued_totals(conn, _outside(served))[1] if served else sites


def _site_queues(conn: Connection, page: Page, served: frozenset[str] | None, *,
                 unserved_only: bool) -> tuple[SiteQueue, ...]:
    if unserved_only and served is None:
        return ()
    outside = _outside(served) if unserved_only and served else None
    rows = sql.queued_sites(conn, page.limit, page.offset, outside)
    return tuple(SiteQueue(row["site"], row["n"], served is None or row["site"] in served)
                 for row in rows)
