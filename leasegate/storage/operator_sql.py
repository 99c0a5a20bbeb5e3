"""SQL of the operators' actions on jobs (retry, redrive) and of the sites table.

Retry puts a finished job back in line as a new attempt: its outcome (result, error,
cost) is cleared, its history and progress are kept. Each is a conditional UPDATE on
the status, like every transition (``tasks_sql``). ``sites`` holds the dispatch
controls an operator set per site (paused, a lease rate); it is the task actor's, and
the query actor gets its controls from the task actor at start-up and on each change.
A throttled site's token bucket (``tokens`` as of ``refilled_at``) is the one row both
queue actors write, of every gateway: read for a draw under the row's lock
(:func:`site_buckets`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leasegate.storage.engine import Connection, Row, dialect
from leasegate.storage.rows import marks

_TABLES = {"task": ("tasks", "task_id"), "query": ("queries", "query_id")}


# What a retry clears beyond the lease and the outcome, per channel: a task's claim,
# renewal, requests and late flag (its attempts go on counting: at most once each);
# a query's attempts, counted afresh (it is redelivered until it succeeds).
_RETRY_CLEARS = {
    "task": "claim_expires_at = NULL, renewed_at = NULL, cancel_requested = 0, "
            "pause_requested = 0, late_result = 0",
    "query": "attempts = 0",
}


def retry(conn: Connection, channel: str, job_id: str, from_status: str,
          expires_at: float, errors: str | None, now: float) -> bool:
    """A finished job (``from_status``) → queued, a new attempt (a task keeps its
    progress), its attempts' ``errors`` as given (kept across retries)."""
    table, key = _TABLES[channel]
    # a query is leasable from now on (the backlog's age), not waiting for a retry
    leasable, since = (", next_attempt_at = NULL, available_at = ?", (now,)) \
        if channel == "query" else ("", ())
    cur = conn.execute(
        f"UPDATE {table} SET status = 'queued', lease_owner = NULL, lease_token = NULL, "
        f"lease_request_id = NULL, lease_expires_at = NULL, {_RETRY_CLEARS[channel]}, "
        "result = NULL, error_code = NULL, error_message = NULL, error_type = NULL, "
        "error_traceback = NULL, cost = NULL, errors = ?, "
        f"outcome_digest = NULL, completed_at = NULL, expires_at = ?, updated_at = ?{leasable} "
        f"WHERE {key} = ? AND status = ?",
        (errors, expires_at, now, *since, job_id, from_status))
    return cur.rowcount == 1


def redrive_candidates(conn: Connection, channel: str, status: str,
                       filters: dict[str, Any], since: float | None, until: float | None,
                       limit: int) -> tuple[int, list[Row]]:
    """``(matched, rows)``: how many jobs of ``status`` match (``filters``: column →
    value, None off, of site, kind, tenant; ``since``/``until``: when they ended), and
    the oldest ``limit`` of them (id, tenant, max_cost)."""
    assert set(filters) <= {"site", "kind", "tenant"}
    table, key = _TABLES[channel]
    return _first_matching(conn, table, f"{key} AS job_id, tenant, max_cost", key, status,
                           filters, "completed_at", since, until, limit)


def stale_candidates(conn: Connection, site: str | None, account: str | None,
                     since: float | None, until: float | None,
                     limit: int) -> tuple[int, list[str]]:
    """``(matched, ids)``: how many stale tasks match (``site``, ``account``: None is
    any; ``since``/``until``: when they went stale), and the ids of the ``limit`` that
    went stale first."""
    matched, rows = _first_matching(conn, "tasks", "task_id", "task_id", "stale",
                                    {"site": site, "account": account}, "stale_at",
                                    since, until, limit)
    return matched, [row["task_id"] for row in rows]


def _first_matching(conn: Connection, table: str, columns: str, key: str, status: str,
                    filters: dict[str, Any], at: str, since: float | None,
                    until: float | None, limit: int) -> tuple[int, list[Row]]:
    """How many rows of ``status`` match ``filters`` (None: off) and ``at`` in
    [``since``, ``until``), and the ``limit`` first by ``at``."""
    where = ["status = ?"]
    args: list[Any] = [status]
    for column, value in filters.items():
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    for bound, op in ((since, ">="), (until, "<")):
        if bound is not None:
            where.append(f"{at} {op} ?")
            args.append(bound)
    clause = " AND ".join(where)
    matched = int(conn.execute(f"SELECT count(*) FROM {table} WHERE {clause}",
                               args).fetchone()[0])
    rows = conn.execute(f"SELECT {columns} FROM {table} WHERE {clause} "
                        f"ORDER BY {at}, {key} LIMIT ?", [*args, limit]).fetchall()
    return matched, rows


# ---- sites ---------------------------------------------------------------------------

def site_controls(conn: Connection) -> list[Row]:
    """Every site an operator paused or throttled."""
    return conn.execute("SELECT * FROM sites ORDER BY site").fetchall()


def site_control(conn: Connection, site: str) -> Row | None:
    row: Row | None = conn.execute("SELECT * FROM sites WHERE site = ?",
                                   (site,)).fetchone()
    return row


def set_site(conn: Connection, site: str, *, paused: bool, reason: str | None,
             by: str | None, leases_per_second: float | None, now: float) -> None:
    """Write a site's controls; a site with neither control left has no row. A new or
    changed rate starts a new bucket (tokens NULL: one token at its first draw); a pause or
    resume keeps the tokens. (Its write locks the site's row, as a draw's read does.)"""
    if not paused and leases_per_second is None:
        conn.execute("DELETE FROM sites WHERE site = ?", (site,))
        return
    conn.execute(
        "INSERT INTO sites (site, paused, reason, changed_by, leases_per_second, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (site) DO UPDATE SET paused = excluded.paused, "
        "reason = excluded.reason, changed_by = excluded.changed_by, "
        "leases_per_second = excluded.leases_per_second, updated_at = excluded.updated_at, "
        "tokens = CASE WHEN sites.leases_per_second = excluded.leases_per_second "
        "THEN sites.tokens END, "
        "refilled_at = CASE WHEN sites.leases_per_second = excluded.leases_per_second "
        "THEN sites.refilled_at END",
        (site, int(paused), reason, by, leases_per_second, now))


def site_buckets(conn: Connection, sites: Sequence[str]) -> dict[str, Row]:
    """The rate and the tokens as of ``refilled_at`` of each of ``sites`` that has a row,
    by site. On PostgreSQL their rows are locked to the commit (in site order, so two
    lease calls never wait for each other in a cycle): a transaction of either queue
    actor, on any gateway, that draws from the same buckets waits for this one to write
    back what it drew. SQLite's write lock already does it."""
    if not sites:
        return {}
    ordered = sorted(set(sites))
    lock = " FOR UPDATE" if dialect(conn) == "postgresql" else ""
    return {row["site"]: row for row in conn.execute(
        "SELECT site, leases_per_second, tokens, refilled_at, drawn_by FROM sites "
        f"WHERE site IN ({marks(ordered)}) ORDER BY site{lock}", ordered)}


def save_tokens(conn: Connection, buckets: Sequence[tuple[float, float, str, str]]) -> None:
    """``(tokens, refilled_at, drawn_by, site)`` of the buckets a lease drew from
    (``drawn_by``: its channel)."""
    conn.executemany("UPDATE sites SET tokens = ?, refilled_at = ?, drawn_by = ? "
                     "WHERE site = ?", buckets)


def queued_by_site(conn: Connection, channel: str, sites: list[str]) -> dict[str, int]:
    """Queued jobs of each of ``sites`` (on the queued-by-site indexes)."""
    if not sites:
        return {}
    table, _ = _TABLES[channel]
    rows = conn.execute(f"SELECT site, count(*) FROM {table} WHERE status = 'queued' "
                        f"AND site IN ({marks(sites)}) GROUP BY site", sites).fetchall()
    return {row[0]: int(row[1]) for row in rows}


# ---- the ledger's: a retried job's hold ---------------------------------------------

def reopen_hold(conn: Connection, channel: str, job_id: str, account: str, amount: int,
                now: float) -> None:
    """The job's hold open again (its settled row, if retention kept it, is reused) and
    its id no longer settled: the retry's settle resolves it, once."""
    conn.execute("DELETE FROM ledger_holds WHERE channel = ? AND job_id = ?", (channel, job_id))
    conn.execute("DELETE FROM ledger_settled_jobs WHERE channel = ? AND job_id = ?",
                 (channel, job_id))
    conn.execute("INSERT INTO ledger_holds (channel, job_id, account, amount, status, "
                 "created_at) VALUES (?, ?, ?, ?, 'open', ?)",
                 (channel, job_id, account, amount, now))
