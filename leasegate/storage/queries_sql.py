"""SQL of the queries table (owned by the query actor).

Times are wall seconds (REAL). A lease is valid strictly before
``lease_expires_at``; a query is live strictly before ``expires_at``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from leasegate.storage.engine import Connection, Row, respelled, skip_locked
from leasegate.storage.jobs_sql import JobTable, Outcome
from leasegate.storage.keyset import merged, ordered
from leasegate.storage.rows import expire_each, lease_rows, marks

TERMINAL = ("succeeded", "failed", "expired")

JOBS: Final = JobTable("queries", "query_id", "query_tombstones",
                       finished="completed_at IS NOT NULL")
"""What the queries table shares with the tasks': ``JOBS.get``, ``JOBS.insert_many``…"""

LEASABLE: Final = "status = 'queued' AND next_attempt_at IS NULL"
"""A query a lease may take (the predicate of its indexes): queued, not waiting for a
retry (the query actor's timer clears ``next_attempt_at`` when it comes)."""

# INDEXED BY: with both indexes on queued rows SQLite's planner would take either
# (PostgreSQL's indexes name the rowid they are ordered by: no hint needed).
_ALL_QUEUED, _SITE_QUEUED = (
    respelled(f"SELECT *, rowid FROM queries INDEXED BY {index}", (f" INDEXED BY {index}", ""))
    for index in ("queries_ready", "queries_queued"))
_ORDER = ("rowid",)


def next_queued(conn: Connection, sites: list[str] | None, now: float,
                limit: int, *, admit: Callable[[str], bool] | None = None) -> list[Row]:
    """Oldest first; a query past its TTL is never handed out.

    Each stream is an index range of queued rows only (``queries_ready``, or
    ``queries_queued`` per site), read a page at a time.
    """
    live = f"{LEASABLE} AND expires_at > ?"
    if sites is None:
        rows = ordered(conn, _ALL_QUEUED, live, [now], _ORDER, limit)
    else:
        distinct = sorted(set(sites))
        if not distinct:
            return []
        page = -(-limit // len(distinct))
        by_site = f"site = ? AND {live}"
        rows = merged((ordered(conn, _SITE_QUEUED, by_site, [site, now], _ORDER, page)
                       for site in distinct), key=lambda row: (row["rowid"],))
    if admit is not None:  # asked lazily: only of the rows taken (a token each)
        rows = (row for row in rows if admit(row["site"]))
    return list(itertools.islice(rows, limit))


def leased_by_request(conn: Connection, worker_id: str, request_id: str,
                      sites: list[str] | None, limit: int) -> list[Row]:
    """The leases of an earlier call with this request id, within this call's limits."""
    sql = ("SELECT * FROM queries WHERE status = 'leased' AND lease_owner = ? "
           "AND lease_request_id = ?")
    args: list[Any] = [worker_id, request_id]
    if sites is not None:
        sql += f" AND site IN ({marks(sites)})"
        args += sites
    return conn.execute(sql + " ORDER BY rowid LIMIT ?", [*args, limit]).fetchall()


def take_leases(conn: Connection, tokens: Sequence[tuple[str, str]], worker_id: str,
                request_id: str | None, expires_at: float, now: float) -> list[Row]:
    """queued → leased, each ``(query_id, token)`` with its token, counting the attempt,
    in one UPDATE: the leased rows, in the order given; a query that was not queued is
    left out."""
    return lease_rows(conn, "queries", "query_id", tokens, (
        "status = 'leased', lease_owner = ?, lease_request_id = ?, lease_expires_at = ?, "
        "attempts = attempts + 1, updated_at = ?"), [worker_id, request_id, expires_at, now],
        also="next_attempt_at IS NULL")


def give_back(conn: Connection, query_id: str, token: str, now: float) -> bool:
    """leased → queued for a lease nobody received: the attempt is not counted."""
    cur = conn.execute(
        "UPDATE queries SET status = 'queued', lease_owner = NULL, lease_token = NULL, "
        "lease_request_id = NULL, lease_expires_at = NULL, attempts = attempts - 1, "
        "updated_at = ? WHERE query_id = ? AND status = 'leased' AND lease_token = ?",
        (now, query_id, token),
    )
    return cur.rowcount == 1


@dataclass(frozen=True)
class QueryFinish(Outcome):
    """A query's outcome (:func:`finish_many`): the query leaves ``leased`` only under
    ``lease_token``. Status ``queued`` is a retry (waiting until ``next_attempt_at``,
    not finished; ``refund``: attempts given back, 1 for a snooze)."""

    next_attempt_at: float | None
    errors: str | None
    refund: int


FINISH: Final = {"next_attempt_at": "DOUBLE PRECISION", "errors": "TEXT", "refund": "BIGINT"}
"""The columns a :class:`QueryFinish` writes beside its outcome's, and their SQL types."""


def finish_many(conn: Connection, finishes: Sequence[QueryFinish], now: float) -> list[Row]:
    """leased → an outcome for each query, in one UPDATE; a query whose lease is not
    that token is left as it was (``queued``, a retry, is not finished). The rows, as
    they are now (in no order)."""
    return JOBS.finish_many(
        conn, finishes, FINISH, "next_attempt_at = v.next_attempt_at, errors = v.errors, "
        "attempts = queries.attempts - v.refund", "queued",
        "queries.status = 'leased' AND queries.lease_token = v.lease_token", now)


def expire_past_ttl(conn: Connection, now: float) -> list[Row]:
    """queued/leased past TTL → expired. The TTL is checked before redelivery."""
    return expire_each(
        conn, "SELECT query_id, kind, attempts FROM queries "
        "WHERE status IN ('queued', 'leased') AND expires_at <= ?", (now,),
        "UPDATE queries SET status = 'expired', lease_expires_at = NULL, error_code = NULL, "
        "next_attempt_at = NULL, "
        "error_message = ?, error_type = NULL, error_traceback = NULL, updated_at = ?, "
        "completed_at = ? WHERE query_id = ?",
        lambda row: (f"not completed within its TTL (attempts={row['attempts']}; "
                     "most likely no worker was online)"), now)


def lapsed_leases(conn: Connection, now: float) -> list[Row]:
    return conn.execute(skip_locked(
        "SELECT query_id, site, attempts, max_attempts, lease_owner, errors FROM queries "
        "WHERE status = 'leased' AND lease_expires_at <= ?"), (now,)
    ).fetchall()


def requeue(conn: Connection, query_id: str, errors: str, now: float) -> None:
    """leased → queued at once (a lapsed lease), its error kept."""
    conn.execute(
        "UPDATE queries SET status = 'queued', lease_owner = NULL, lease_token = NULL, "
        "lease_request_id = NULL, lease_expires_at = NULL, errors = ?, available_at = ?, "
        "updated_at = ? WHERE query_id = ? AND status = 'leased'",
        (errors, now, now, query_id),
    )


def fail_exhausted(conn: Connection, query_id: str, attempts: int, errors: str,
                   now: float) -> None:
    conn.execute(
        "UPDATE queries SET status = 'failed', lease_expires_at = NULL, error_message = ?, "
        "errors = ?, updated_at = ?, completed_at = ? WHERE query_id = ? "
        "AND status = 'leased'",
        (f"leased {attempts} times without a result; not redelivered again "
         "(the site page may be stuck or the worker keeps crashing)", errors, now, now,
         query_id),
    )


def due_retries(conn: Connection, now: float) -> list[str]:
    """Queued queries whose wait for their next attempt is over become leasable (as of
    that instant: ``available_at``); the sites they are on."""
    return [row[0] for row in conn.execute(
        "UPDATE queries SET available_at = next_attempt_at, next_attempt_at = NULL "
        "WHERE status = 'queued' AND next_attempt_at <= ? RETURNING site", (now,))]


def next_deadline(conn: Connection) -> float | None:
    row = conn.execute(
        "SELECT min(t) FROM ("
        " SELECT min(lease_expires_at) AS t FROM queries WHERE status = 'leased'"
        " UNION ALL"
        " SELECT min(expires_at) FROM queries WHERE status IN ('queued', 'leased')"
        " UNION ALL"
        " SELECT min(next_attempt_at) FROM queries"
        " WHERE status = 'queued' AND next_attempt_at IS NOT NULL"
        ") AS deadlines"
    ).fetchone()
    return None if row[0] is None else float(row[0])


def backlog(conn: Connection, site: str) -> tuple[int, float | None]:
    """The leasable queries of ``site`` (an index-only count of ``queries_queued``) and
    since when the oldest of them is leasable (one seek of ``queries_leasable_since``)."""
    n = conn.execute(f"SELECT count(*) FROM queries WHERE site = ? AND {LEASABLE}",
                     (site,)).fetchone()[0]
    oldest = conn.execute(f"SELECT min(available_at) FROM queries WHERE site = ? "
                          f"AND {LEASABLE}", (site,)).fetchone()[0]
    return int(n), None if oldest is None else float(oldest)


# Live queries (each status on its partial index), by site.
LIVE = ("queued", "leased")


def count_live(conn: Connection, status: str) -> tuple[int, int]:
    """Queries of ``status`` (queued or leased), and the number of sites they are on."""
    row = conn.execute("SELECT count(*), count(DISTINCT site) FROM queries WHERE status = ?",
                       (status,)).fetchone()
    return int(row[0]), int(row[1])


def live_sites(conn: Connection, status: str, limit: int) -> list[Row]:
    """The ``limit`` sites with the most queries of ``status``, most first (``site``, ``n``)."""
    return conn.execute(
        "SELECT site, count(*) AS n FROM queries WHERE status = ? "
        "GROUP BY site ORDER BY n DESC, site LIMIT ?", (status, limit)
    ).fetchall()


def sites_page(conn: Connection, limit: int, offset: int) -> tuple[int, list[Row]]:
    """Sites with live queries, most first, then by name (``site``, ``queued``,
    ``leased``), and how many there are."""
    live = ("SELECT site, 1 AS queued, 0 AS leased FROM queries WHERE status = 'queued' "
            "UNION ALL SELECT site, 0, 1 FROM queries WHERE status = 'leased'")
    total = int(conn.execute(f"SELECT count(DISTINCT site) FROM ({live}) AS live"
                             ).fetchone()[0])
    rows = conn.execute(
        f"SELECT site, sum(queued) AS queued, sum(leased) AS leased FROM ({live}) AS live "
        "GROUP BY site ORDER BY sum(queued) + sum(leased) DESC, site LIMIT ? OFFSET ?",
        (limit, offset)
    ).fetchall()
    return total, rows
