"""Task lanes: one row per lane (site + account) with work queued or in flight.

A row says whether the lane is blocked (``blocked_by``: its task leased,
running or stale) and which queued task is its head (highest
priority, then oldest, then first submitted). The lease walks the free lanes
in head order on a partial index, so it reads one row per lane it hands out,
however much waits behind blocked lanes or on the lanes it takes::

    rows = next_leasable(conn, sites=["s1"], now=now, limit=10)   # task_id, site, account

Triggers on ``tasks`` (``sqlite/schema.sql``) keep every row right in the
statement that changes a task (insert, any change of status, priority or lane,
delete), so every transition, whichever module writes it, updates its lane in
its own transaction. A submit only compares itself with its lane's head; any
other change recomputes the lane's row from ``tasks`` through two index seeks
(the in-flight task on ``tasks_one_per_lane``, the head on
``tasks_lane_queue``); a lane with nothing queued or in flight has no row.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from leasegate.storage.engine import Connection, Row, respelled
from leasegate.storage.keyset import PAGE, merged, ordered

IN_FLIGHT = ("leased", "running", "stale")


def in_flight(column: str = "status") -> str:
    """The in-flight test as the partial indexes on in-flight tasks spell their WHERE
    (``tasks_one_per_lane``, ``tasks_lease_owner``): a query must spell it the same way
    for SQLite to use them."""
    return "(" + " OR ".join(f"{column} = '{s}'" for s in IN_FLIGHT) + ")"


# The lease's reads: a page of free lanes in head order with their heads' times,
# and the best leasable task of one lane when its head is not (yet) leasable.
# On SQLite the index is named (and CROSS JOIN fixes the join order) so that no
# statistics can turn the plan into a walk of the queue. PostgreSQL has neither: the
# page of lanes is read in a subquery (keyset.PAGE), whose LIMIT makes every plan
# take it in index order before the join. Joined directly, the generic plan of a
# statement prepared while the tables were small hashed the whole tasks table and
# sorted the free lanes, on every lease (its tasks have a real rowid column,
# tasks_lane_queue ends with it).
_LANES = ("SELECT l.site, l.account, l.head_task AS task_id, t.not_before, t.expires_at, "
          "l.head_rank, l.head_created, l.head_seq FROM task_lanes AS l INDEXED BY {index} "
          "CROSS JOIN tasks AS t ON t.task_id = l.head_task")
_ALL_LANES, _SITE_LANES = (
    respelled(_LANES.format(index=index), (
        f"FROM task_lanes AS l INDEXED BY {index} CROSS JOIN",
        f"FROM (SELECT * FROM task_lanes AS l {PAGE}) AS l JOIN"))
    for index in ("task_lanes_ready", "task_lanes_ready_by_site"))
_FREE = "l.blocked_by IS NULL AND l.head_task IS NOT NULL"
_ORDER = ("l.head_rank", "l.head_created", "l.head_seq")
LANE_BEST = respelled(
    "SELECT task_id, site, account, not_before, expires_at, -priority AS head_rank, "
    "created_at AS head_created, rowid AS head_seq FROM tasks INDEXED BY tasks_lane_queue "
    "WHERE site = ? AND account = ? AND status = 'queued' "
    "AND (not_before IS NULL OR not_before <= ?) AND expires_at > ? "
    "ORDER BY priority DESC, created_at, rowid LIMIT 1", (" INDEXED BY tasks_lane_queue", ""))


def free_lanes(conn: Connection, site: str | None, page: int) -> Iterator[Row]:
    """Lanes with nothing in flight and something queued (of ``site``), best head first."""
    if site is None:
        return ordered(conn, _ALL_LANES, _FREE, [], _ORDER, page)
    return ordered(conn, _SITE_LANES, f"l.site = ? AND {_FREE}", [site], _ORDER, page)


def _key(row: Row) -> tuple[Any, ...]:
    return (row["head_rank"], row["head_created"], row["head_seq"])


def next_leasable(conn: Connection, sites: list[str] | None, now: float,
                  limit: int, *, admit: Callable[[str], bool] | None = None) -> list[Row]:
    """The best leasable task of up to ``limit`` free lanes, best first.

    Leasable: queued, ``not_before`` passed, within its TTL, on an allowed site,
    its lane free. A lane's head bounds its best leasable task, so walking the
    lanes in head order and handing out a candidate once no later lane can
    beat it (its key <= the current head) gives the exact order of a full scan
    while reading, when heads are leasable, one lane per task handed out. A
    head waiting for its ``not_before`` costs a seek into its lane. ``admit(site)``
    is asked of each task about to be picked (a paused or throttled site's is passed
    over; a True may use up one of the site's tokens).
    """
    if sites is None:
        lanes = free_lanes(conn, None, limit)
    else:
        distinct = sorted(set(sites))
        if not distinct:
            return []
        page = -(-limit // len(distinct))
        lanes = merged((free_lanes(conn, site, page) for site in distinct), key=_key)
    picked: list[Row] = []
    waiting: list[tuple[tuple[Any, ...], int, Row]] = []
    tie = itertools.count()
    for lane in lanes:
        candidate: Row | None = lane
        not_before = lane["not_before"]
        if (not_before is not None and not_before > now) or lane["expires_at"] <= now:
            candidate = conn.execute(LANE_BEST, (lane["site"], lane["account"], now,
                                                 now)).fetchone()
        if candidate is not None:
            heapq.heappush(waiting, (_key(candidate), next(tie), candidate))
        bound = _key(lane)
        while waiting and waiting[0][0] <= bound:
            row = heapq.heappop(waiting)[2]
            if admit is None or admit(row["site"]):
                picked.append(row)
            if len(picked) >= limit:
                return picked
    while waiting and len(picked) < limit:
        row = heapq.heappop(waiting)[2]
        if admit is None or admit(row["site"]):
            picked.append(row)
    return picked


def backlog(conn: Connection, site: str) -> tuple[int, float | None]:
    """The tasks of ``site`` a lease could take now, one per free lane (an index-only
    count of its free lanes; a head still waiting for its ``not_before`` counts), and
    since when the oldest of those heads waits: queued, or its ``not_before`` if later
    (one seek of ``task_lanes_oldest``, one of the head's row)."""
    n = conn.execute(f"SELECT count(*) FROM task_lanes AS l WHERE l.site = ? AND {_FREE}",
                     (site,)).fetchone()[0]
    oldest = conn.execute(
        "SELECT t.created_at, t.not_before FROM tasks AS t WHERE t.task_id = ("
        f"SELECT l.head_task FROM task_lanes AS l WHERE l.site = ? AND {_FREE} "
        "ORDER BY l.head_created LIMIT 1)", (site,)).fetchone()
    if oldest is None:
        return int(n), None
    created, not_before = oldest
    return int(n), float(created if not_before is None else max(created, not_before))
