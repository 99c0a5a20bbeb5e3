"""Task lanes: one row per lane (site + account) with work queued or in flight.

A row says whether the lane is blocked (``blocked_by``: its task leased,
running or stale, and since when) and which queued task is its head (highest
priority, then oldest, then first submitted). The lease walks the free lanes
in head order on a partial index, so it reads one row per lane it hands out,
however much waits behind blocked lanes or on the lanes it takes::

    rows = next_leasable(conn, sites=["s1"], now=now, limit=10)   # task_id, site, account

Triggers on ``tasks`` keep every row right in the statement that changes a
task (insert, any change of status, priority or lane, delete), so every
transition, whichever module writes it, updates its lane in its own
transaction. A submit only compares itself with its lane's head; any other
change recomputes the lane's row from ``tasks`` through two index seeks (the
in-flight task on ``tasks_one_per_lane``, the head on ``tasks_lane_queue``);
a lane with nothing queued or in flight has no row.
"""

from __future__ import annotations

import heapq
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from leasegate.storage.keyset import merged, ordered

LIVE = ("queued", "leased", "running", "stale")
IN_FLIGHT = ("leased", "running", "stale")


def _in_list(column: str, statuses: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(s) for s in statuses)})"


def _or_chain(column: str, statuses: tuple[str, ...]) -> str:
    return "(" + " OR ".join(f"{column} = '{s}'" for s in statuses) + ")"


def in_flight(column: str = "status") -> str:
    """The in-flight test as the partial indexes on in-flight tasks spell it (since
    migration 11): a query must spell it the same way for SQLite to use them."""
    return _or_chain(column, IN_FLIGHT)


# How a refresh stores the lane it computed, and drops it if it holds nothing.
_STORE = """    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = {row}.site AND account = {row}.account
        AND blocked_by IS NULL AND head_task IS NULL;"""

# The lane of ``{row}`` (NEW or OLD in a trigger) recomputed, then dropped if empty, as
# migration 9 wrote it; migration 11 replaces it with _REFRESH below.
_REFRESH_V9 = f"""
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT {{row}}.site, {{row}}.account, b.task_id,
           h.task_id, -h.priority, h.created_at, h.seq
    FROM (SELECT 1)
    LEFT JOIN tasks AS b ON b.site = {{row}}.site AND b.account = {{row}}.account
        AND {_in_list("b.status", IN_FLIGHT)}
    LEFT JOIN (SELECT task_id, priority, created_at, rowid AS seq FROM tasks
               WHERE site = {{row}}.site AND account = {{row}}.account AND status = 'queued'
               ORDER BY priority DESC, created_at, rowid LIMIT 1) AS h
""" + _STORE

# The same with index seeks only (migration 11): the head is joined back by rowid for
# its columns.
_REFRESH = f"""
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT {{row}}.site, {{row}}.account,
           (SELECT task_id FROM tasks WHERE site = {{row}}.site AND account = {{row}}.account
                AND {in_flight()}),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = {{row}}.site AND account = {{row}}.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
""" + _STORE

_NEW, _OLD = _REFRESH_V9.format(row="NEW"), _REFRESH_V9.format(row="OLD")

# Migration 9. ``head_rank`` is -priority so that every index and keyset runs
# ascending; ``head_seq`` (the head's rowid) orders tasks submitted in one instant.
# Which lanes are blocked, and since when, is read from the tasks themselves
# (``/health``: stale tasks); a lane only says whether it is free.
# The old ``tasks_queued`` index only served the lease's walk of the whole queue.
SCHEMA = f"""
CREATE INDEX tasks_lane_queue ON tasks (site, account, priority DESC, created_at)
    WHERE status = 'queued';
DROP INDEX tasks_queued;
CREATE TABLE task_lanes (
    site          TEXT NOT NULL,
    account       TEXT NOT NULL,
    blocked_by    TEXT,
    head_task     TEXT,
    head_rank     INTEGER,
    head_created  REAL,
    head_seq      INTEGER,
    PRIMARY KEY (site, account)
) WITHOUT ROWID;
CREATE INDEX task_lanes_ready ON task_lanes (head_rank, head_created, head_seq)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
CREATE INDEX task_lanes_ready_by_site ON task_lanes (site, head_rank, head_created, head_seq)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
INSERT INTO task_lanes (site, account, head_task, head_rank, head_created, head_seq)
    SELECT site, account, task_id, -priority, created_at, seq FROM (
        SELECT site, account, task_id, priority, created_at, rowid AS seq,
               row_number() OVER (PARTITION BY site, account
                                  ORDER BY priority DESC, created_at, rowid) AS n
        FROM tasks WHERE status = 'queued')
    WHERE n = 1;
INSERT INTO task_lanes (site, account, blocked_by)
    SELECT site, account, task_id FROM tasks WHERE {_in_list("status", IN_FLIGHT)}
    ON CONFLICT (site, account) DO UPDATE SET blocked_by = excluded.blocked_by;
CREATE TRIGGER task_lanes_insert_queued AFTER INSERT ON tasks
    WHEN NEW.status = 'queued'
BEGIN
    INSERT INTO task_lanes (site, account, head_task, head_rank, head_created, head_seq)
    VALUES (NEW.site, NEW.account, NEW.task_id, -NEW.priority, NEW.created_at, NEW.rowid)
    ON CONFLICT (site, account) DO UPDATE SET
        head_task = excluded.head_task, head_rank = excluded.head_rank,
        head_created = excluded.head_created, head_seq = excluded.head_seq
    WHERE head_task IS NULL OR (excluded.head_rank, excluded.head_created, excluded.head_seq)
                                < (head_rank, head_created, head_seq);
END;
"""

def _triggers(new: str, old: str, one_of: Callable[[str, tuple[str, ...]], str]) -> str:
    """The triggers that keep each lane right after its change (``new``, ``old``: the
    refresh of NEW's or OLD's lane; ``one_of``: how a WHEN clause spells a status set)."""
    return f"""CREATE TRIGGER task_lanes_insert AFTER INSERT ON tasks
    WHEN {one_of("NEW.status", IN_FLIGHT)}
BEGIN{new}
END;
CREATE TRIGGER task_lanes_update AFTER UPDATE OF status, priority, created_at, site, account
    ON tasks
    WHEN ({one_of("OLD.status", LIVE)} OR {one_of("NEW.status", LIVE)})
        AND (OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority
             OR OLD.created_at IS NOT NEW.created_at OR OLD.site IS NOT NEW.site
             OR OLD.account IS NOT NEW.account)
        -- in flight to in flight (a start; stale): the same task blocks, the head
        -- is queued work: nothing of the lane changes
        AND NOT ({one_of("OLD.status", IN_FLIGHT)} AND {one_of("NEW.status", IN_FLIGHT)}
                 AND OLD.site IS NEW.site AND OLD.account IS NEW.account)
BEGIN{new}
END;
CREATE TRIGGER task_lanes_leave AFTER UPDATE OF site, account ON tasks
    WHEN {one_of("OLD.status", LIVE)}
        AND (OLD.site IS NOT NEW.site OR OLD.account IS NOT NEW.account)
BEGIN{old}
END;
CREATE TRIGGER task_lanes_delete AFTER DELETE ON tasks
    WHEN {one_of("OLD.status", LIVE)}
BEGIN{old}
END;
"""


SCHEMA += _triggers(_NEW, _OLD, _in_list)

# Migration 11: the same triggers, and the partial indexes on in-flight tasks, about 3x
# cheaper per status change (a start 200 -> 24 us, a lease 240 -> 37 us, a result
# 235 -> 34 us of CPU, measured on 3,000 tasks over 100 lanes). ``status IN (...)`` of
# three or more values makes SQLite build the list as a temporary table each time a
# statement runs (in a trigger, for every row it changes, whether the trigger then
# runs or not; in a partial index's WHERE, for every statement that writes the
# table), so the sets are spelled as ORs. The refresh seeks with scalar subqueries
# where a LEFT JOIN on a LIMIT 1 subquery was materialized on every row.
SCHEMA_REFRESH = f"""
DROP INDEX tasks_one_per_lane;
CREATE UNIQUE INDEX tasks_one_per_lane ON tasks (site, account) WHERE {in_flight()};
DROP INDEX tasks_lease_owner;
CREATE INDEX tasks_lease_owner ON tasks (lease_owner, lease_request_id) WHERE {in_flight()};
DROP TRIGGER task_lanes_insert;
DROP TRIGGER task_lanes_update;
DROP TRIGGER task_lanes_leave;
DROP TRIGGER task_lanes_delete;
""" + _triggers(_REFRESH.format(row="NEW"), _REFRESH.format(row="OLD"), _or_chain)

# The lease's reads: a page of free lanes in head order with their heads' times,
# and the best leasable task of one lane when its head is not (yet) leasable.
# The index is named (and CROSS JOIN fixes the join order) so that no statistics
# can turn the plan into a walk of the queue.
_LANES = ("SELECT l.site, l.account, l.head_task AS task_id, t.not_before, t.expires_at, "
          "l.head_rank, l.head_created, l.head_seq FROM task_lanes AS l INDEXED BY {index} "
          "CROSS JOIN tasks AS t ON t.task_id = l.head_task")
_FREE = "l.blocked_by IS NULL AND l.head_task IS NOT NULL"
_ORDER = ("l.head_rank", "l.head_created", "l.head_seq")
LANE_BEST = (
    "SELECT task_id, site, account, not_before, expires_at, -priority AS head_rank, "
    "created_at AS head_created, rowid AS head_seq FROM tasks INDEXED BY tasks_lane_queue "
    "WHERE site = ? AND account = ? AND status = 'queued' "
    "AND (not_before IS NULL OR not_before <= ?) AND expires_at > ? "
    "ORDER BY priority DESC, created_at, rowid LIMIT 1")


def free_lanes(conn: sqlite3.Connection, site: str | None, page: int) -> Iterator[sqlite3.Row]:
    """Lanes with nothing in flight and something queued (of ``site``), best head first."""
    if site is None:
        return ordered(conn, _LANES.format(index="task_lanes_ready"), _FREE, [], _ORDER, page)
    return ordered(conn, _LANES.format(index="task_lanes_ready_by_site"),
                   f"l.site = ? AND {_FREE}", [site], _ORDER, page)


def _key(row: sqlite3.Row) -> tuple[Any, ...]:
    return (row["head_rank"], row["head_created"], row["head_seq"])


def next_leasable(conn: sqlite3.Connection, sites: list[str] | None, now: float,
                  limit: int) -> list[sqlite3.Row]:
    """The best leasable task of up to ``limit`` free lanes, best first.

    Leasable: queued, ``not_before`` passed, within its TTL, on an allowed site,
    its lane free. A lane's head bounds its best leasable task, so walking the
    lanes in head order and handing out a candidate once no later lane can
    beat it (its key <= the current head) gives the exact order of a full scan
    while reading, when heads are leasable, one lane per task handed out. A
    head waiting for its ``not_before`` costs a seek into its lane.
    """
    if sites is None:
        lanes = free_lanes(conn, None, limit)
    else:
        distinct = sorted(set(sites))
        if not distinct:
            return []
        page = -(-limit // len(distinct))
        lanes = merged((free_lanes(conn, site, page) for site in distinct), key=_key)
    picked: list[sqlite3.Row] = []
    waiting: list[tuple[tuple[Any, ...], int, sqlite3.Row]] = []
    tie = itertools.count()
    for lane in lanes:
        candidate: sqlite3.Row | None = lane
        not_before = lane["not_before"]
        if (not_before is not None and not_before > now) or lane["expires_at"] <= now:
            candidate = conn.execute(LANE_BEST, (lane["site"], lane["account"], now,
                                                 now)).fetchone()
        if candidate is not None:
            heapq.heappush(waiting, (_key(candidate), next(tie), candidate))
        bound = _key(lane)
        while waiting and waiting[0][0] <= bound:
            picked.append(heapq.heappop(waiting)[2])
            if len(picked) >= limit:
                return picked
    while waiting and len(picked) < limit:
        picked.append(heapq.heappop(waiting)[2])
    return picked
