"""SQL of the tasks and workers tables (owned by the task actor).

Times are wall seconds (REAL). A deadline is reached when ``now >= deadline``:
a claim is valid strictly before ``claim_expires_at``, a running lease
strictly before ``lease_expires_at``, a queued task is live strictly before
``expires_at`` (its ``task_ttl`` deadline) and may be leased once
``not_before <= now``.

Every transition is a conditional UPDATE on the status (and the lease token
where there is one); callers check the returned rowcount. One task in flight
per lane (site + account) is enforced by the partial unique index
``tasks_one_per_lane`` as well as by the lease query, which reads the lanes
(``lanes_sql``) that triggers on ``tasks`` keep (``sqlite/schema.sql``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from leasegate.storage import lanes_sql
from leasegate.storage.engine import Connection, Row, respelled, skip_locked
from leasegate.storage.jobs_sql import JobTable, Outcome
from leasegate.storage.rows import expire_each, lease_rows, marks, update_rows

STATES = ("queued", "leased", "running", "succeeded", "failed", "canceled", "paused", "stale",
          "expired")
TERMINAL = ("succeeded", "failed", "canceled", "expired")
UNFINISHED = ("queued", "leased", "running", "paused", "stale")

JOBS: Final = JobTable("tasks", "task_id", "task_tombstones",
                       finished="status IN ('succeeded', 'failed', 'canceled', 'expired')")
"""What the tasks table shares with the queries': ``JOBS.get``, ``JOBS.insert_many``…
(a purged task's artifact rows cascade)."""


def _held(status: str, deadline: str) -> str:
    """The condition of a worker's call on a task it holds: the task in ``status``, the
    call's token and worker (parameters after the task id), ``deadline`` not passed."""
    return (f"WHERE task_id = ? AND status = '{status}' AND lease_token = ? "
            f"AND lease_owner = ? AND {deadline} > ?")


# A running lease renewed (its own deadline; a start: start_many).
_RENEW = ("UPDATE tasks SET lease_expires_at = ?, renewed_at = ?, "
          "progress = coalesce(?, progress), updated_at = ? "
          + _held("running", "lease_expires_at"))

_CLEAR_LEASE = ("lease_owner = NULL, lease_token = NULL, lease_request_id = NULL, "
                "claim_expires_at = NULL, lease_expires_at = NULL")

# The statements PostgreSQL spells otherwise: a NULL-safe comparison with a parameter
# (SQLite's `IS ?`, from 3.39 also IS NOT DISTINCT FROM, which older SQLites lack), the
# smaller of two values (SQLite's two-argument min()).
_NULL_SAFE_TOKEN = ("lease_token IS ?", "lease_token IS NOT DISTINCT FROM ?")
_CANCEL_UNLEASED = respelled(
    "UPDATE tasks SET status = 'canceled', updated_at = ?, completed_at = ? "
    "WHERE task_id = ? AND status = ? AND lease_token IS ?", _NULL_SAFE_TOKEN)
_PAUSE_QUEUED = respelled(
    "UPDATE tasks SET status = 'paused', pause_requested = 0, updated_at = ? "
    "WHERE task_id = ? AND status = 'queued' AND lease_token IS ?", _NULL_SAFE_TOKEN)
_RESUME = respelled(
    f"UPDATE tasks SET status = 'queued', {_CLEAR_LEASE}, renewed_at = NULL, "
    "pause_requested = 0, expires_at = ?, updated_at = ? "
    "WHERE task_id = ? AND status = 'paused' AND lease_token IS ?", _NULL_SAFE_TOKEN)
_NEXT_DEADLINE = respelled(
    "SELECT min(t) FROM ("
    " SELECT min(claim_expires_at) AS t FROM tasks WHERE status = 'leased'"
    " UNION ALL"
    " SELECT min(min(lease_expires_at, started_at + ?)) FROM tasks WHERE status = 'running'"
    " UNION ALL"
    " SELECT min(expires_at) FROM tasks WHERE status = 'queued'"
    " UNION ALL"
    " SELECT min(not_before) FROM tasks WHERE status = 'queued' AND not_before > ?"
    ") AS deadlines", ("min(min(", "min(least("))


# ---- reads ----------------------------------------------------------------------

def count_unfinished(conn: Connection) -> tuple[tuple[str, int], ...]:
    """Each unfinished status's count, every one on its partial index."""
    return tuple((status, int(conn.execute(
        "SELECT count(*) FROM tasks WHERE status = ?", (status,)).fetchone()[0]))
        for status in UNFINISHED)


def next_queued(conn: Connection, sites: list[str] | None, now: float,
                limit: int, *, admit: Callable[[str], bool] | None = None) -> list[Row]:
    """The best leasable task of up to ``limit`` distinct free lanes, best first
    (highest priority, then oldest); rows of ``task_id``, ``site``, ``account``.

    It walks the free lanes (the ``task_lanes`` table), never the queue itself,
    so a backlog behind a blocked lane or deep in a taken one costs nothing.
    """
    return lanes_sql.next_leasable(conn, sites, now, limit, admit=admit)


def leased_by_request(conn: Connection, worker_id: str, request_id: str,
                      sites: list[str] | None, limit: int) -> list[Row]:
    """The still-unstarted claims of an earlier lease call, within this call's limits."""
    args: list[Any] = [worker_id, request_id]
    site_clause = ""
    if sites is not None:
        site_clause = f" AND site IN ({marks(sites)})"
        args += sites
    return conn.execute(
        "SELECT * FROM tasks WHERE status = 'leased' AND lease_owner = ? "
        f"AND lease_request_id = ?{site_clause} "
        "ORDER BY priority DESC, created_at, task_id LIMIT ?",
        [*args, limit],
    ).fetchall()


# ---- transitions ------------------------------------------------------------------

def take_leases(conn: Connection, tokens: Sequence[tuple[str, str]], worker_id: str,
                request_id: str | None, claim_expires_at: float, now: float) -> list[Row]:
    """queued → leased, each ``(task_id, token)`` with its token, in one UPDATE: only a
    claim; no attempt is burned until the worker starts. The leased rows, in the
    order given; a task that was not queued is left out."""
    return lease_rows(conn, "tasks", "task_id", tokens, (
        "status = 'leased', lease_owner = ?, lease_request_id = ?, claim_expires_at = ?, "
        "lease_expires_at = NULL, updated_at = ?"), [worker_id, request_id, claim_expires_at, now])


START: Final = {"lease_token": "TEXT", "lease_owner": "TEXT", "at": "DOUBLE PRECISION"}
"""The columns of each start in :func:`start_many`, after the task's id, with their SQL
types."""


def start_many(conn: Connection, starts: Sequence[Sequence[Any]], lease_expires_at: float,
               now: float) -> list[Row]:
    """leased → running within the claim window, for many tasks in one UPDATE (the
    attempt is burned here): each of ``starts`` is ``(task_id, lease_token, worker_id,
    now)`` (:data:`START`: ``now`` per row, as the claim's deadline is compared in the
    statement's WHERE, which takes no parameters of its own); a task whose claim the
    call does not hold is left as it was. The running rows, as they are now (in no
    order)."""
    return update_rows(conn, "tasks", "task_id", START, starts, (
        "status = 'running', claim_expires_at = NULL, lease_expires_at = ?, renewed_at = ?, "
        "started_at = ?, attempts = tasks.attempts + 1, updated_at = ?"),
        [lease_expires_at, now, now, now],
        "tasks.status = 'leased' AND tasks.lease_token = v.lease_token "
        "AND tasks.lease_owner = v.lease_owner AND tasks.claim_expires_at > v.at")


def renew(conn: Connection, task_id: str, worker_id: str, token: str,
          lease_expires_at: float, progress: str | None, now: float) -> bool:
    cur = conn.execute(_RENEW, (lease_expires_at, now, progress, now, task_id, token,
                                worker_id, now))
    return cur.rowcount == 1


def back_to_queue(conn: Connection, task_id: str, from_status: str, token: str,
                  to_status: str, now: float, expires_at: float | None = None) -> bool:
    """A claim or lease that never became (or is no longer) work: clear the lease.

    ``to_status`` is ``queued``, or ``paused``/``canceled`` when the client asked
    for that meanwhile. ``expires_at`` restarts the TTL clock (None keeps it).
    """
    completed = now if to_status == "canceled" else None
    pause_requested = "0" if to_status == "paused" else "pause_requested"
    cur = conn.execute(
        f"UPDATE tasks SET status = ?, {_CLEAR_LEASE}, renewed_at = NULL, "
        f"pause_requested = {pause_requested}, expires_at = coalesce(?, expires_at), "
        "completed_at = ?, updated_at = ? "
        "WHERE task_id = ? AND status = ? AND lease_token = ?",
        (to_status, expires_at, completed, now, task_id, from_status, token),
    )
    return cur.rowcount == 1


@dataclass(frozen=True)
class TaskFinish(Outcome):
    """A task's outcome (:func:`finish_many`): the task leaves ``from_status`` only
    under ``lease_token``; ``late_result`` 1 for a stale task's report."""

    from_status: str
    progress: str | None
    late_result: int


FINISH: Final = {"from_status": "TEXT", "progress": "TEXT", "late_result": "SMALLINT"}
"""The columns a :class:`TaskFinish` writes beside its outcome's, and their SQL types."""


def finish_many(conn: Connection, finishes: Sequence[TaskFinish], now: float) -> list[Row]:
    """running (or stale, a late result) → a worker's outcome for each task, in one
    UPDATE; a task no longer in ``from_status`` under that token is left as it was. The
    finished rows, as they are now (in no order).

    The lease owner and token stay on the row so an identical retry is
    recognised; ``paused`` leaves the task unfinished (no ``completed_at``).
    """
    return JOBS.finish_many(
        conn, finishes, FINISH, "claim_expires_at = NULL, "
        "progress = coalesce(v.progress, tasks.progress), late_result = v.late_result, "
        "pause_requested = CASE WHEN v.status = 'paused' THEN 0 ELSE tasks.pause_requested "
        "END", "paused", "tasks.status = v.from_status AND tasks.lease_token = v.lease_token",
        now)


def cancel_unleased(conn: Connection, task_id: str, from_status: str,
                    token: str | None, now: float) -> bool:
    """queued/paused → canceled (``token``: the row's, usually None; a paused
    task keeps the token of the lease that paused it)."""
    cur = conn.execute(_CANCEL_UNLEASED, (now, now, task_id, from_status, token))
    return cur.rowcount == 1


def set_flag(conn: Connection, task_id: str, flag: str, value: bool, from_status: str,
             token: str, now: float) -> bool:
    """cancel_requested / pause_requested on a leased or running task."""
    assert flag in ("cancel_requested", "pause_requested")
    cur = conn.execute(
        f"UPDATE tasks SET {flag} = ?, updated_at = ? "
        "WHERE task_id = ? AND status = ? AND lease_token = ?",
        (int(value), now, task_id, from_status, token),
    )
    return cur.rowcount == 1


def pause_queued(conn: Connection, task_id: str, token: str | None,
                 now: float) -> bool:
    cur = conn.execute(_PAUSE_QUEUED, (now, task_id, token))
    return cur.rowcount == 1


def resume(conn: Connection, task_id: str, token: str | None, expires_at: float,
           now: float) -> bool:
    """paused → queued with its checkpoint; the lease is cleared, the TTL clock restarts."""
    cur = conn.execute(_RESUME, (expires_at, now, task_id, token))
    return cur.rowcount == 1


def make_stale(conn: Connection, task_id: str, token: str, reason: str,
               now: float) -> bool:
    cur = conn.execute(
        "UPDATE tasks SET status = 'stale', stale_reason = ?, stale_at = ?, "
        "lease_expires_at = NULL, updated_at = ? "
        "WHERE task_id = ? AND status = 'running' AND lease_token = ?",
        (reason, now, now, task_id, token),
    )
    return cur.rowcount == 1


def reclaim(conn: Connection, task_id: str, token: str, status: str, *,
            action: str, reason: str, by: str, now: float, result: str | None,
            error_message: str | None, cost: int | None,
            expires_at: float | None) -> bool:
    """stale → queued (requeue: the lease is cleared) or terminal, recorded."""
    if status in ("queued", "paused", "canceled"):
        lease = f"{_CLEAR_LEASE}, renewed_at = NULL, "
    else:
        lease = "claim_expires_at = NULL, lease_expires_at = NULL, "
    completed = now if status in TERMINAL else None
    cur = conn.execute(
        f"UPDATE tasks SET status = ?, {lease}"
        "pause_requested = CASE WHEN ? = 'paused' THEN 0 ELSE pause_requested END, "
        "result = coalesce(?, result), error_message = coalesce(?, error_message), "
        "cost = coalesce(?, cost), expires_at = coalesce(?, expires_at), "
        "reclaim_action = ?, reclaim_reason = ?, reclaim_by = ?, reclaim_at = ?, "
        "updated_at = ?, completed_at = ? "
        "WHERE task_id = ? AND status = 'stale' AND lease_token = ?",
        (status, status, result, error_message, cost, expires_at, action, reason, by, now, now,
         completed, task_id, token),
    )
    return cur.rowcount == 1


# ---- deadlines ------------------------------------------------------------------------

def lapsed_claims(conn: Connection, now: float) -> list[Row]:
    return conn.execute(skip_locked(
        "SELECT * FROM tasks WHERE status = 'leased' AND claim_expires_at <= ? "
        "ORDER BY claim_expires_at, task_id"), (now,)
    ).fetchall()


def past_hard_timeout(conn: Connection, now: float,
                      hard_timeout: float) -> list[Row]:
    return conn.execute(skip_locked(
        "SELECT * FROM tasks WHERE status = 'running' AND started_at + ? <= ? "
        "ORDER BY started_at, task_id"), (hard_timeout, now)
    ).fetchall()


def lapsed_leases(conn: Connection, now: float) -> list[Row]:
    return conn.execute(skip_locked(
        "SELECT * FROM tasks WHERE status = 'running' AND lease_expires_at <= ? "
        "ORDER BY lease_expires_at, task_id"), (now,)
    ).fetchall()


def expire_past_ttl(conn: Connection, now: float, ttl: float) -> list[Row]:
    """queued past its TTL → expired."""
    return expire_each(
        conn, "SELECT task_id, kind, site, account, attempts FROM tasks "
        "WHERE status = 'queued' AND expires_at <= ?", (now,),
        "UPDATE tasks SET status = 'expired', error_code = NULL, error_message = ?, "
        "error_type = NULL, error_traceback = NULL, "
        "updated_at = ?, completed_at = ? WHERE task_id = ? AND status = 'queued'",
        lambda row: (f"not started within task_ttl ({ttl:g} s) while queued (attempts="
                     f"{row['attempts']}; most likely no worker serves site {row['site']}, "
                     "or its lane was blocked)"), now)


def expire_paused(conn: Connection, now: float, ttl: float) -> list[Row]:
    """paused for ``ttl`` (since it last changed: paused, then nothing) → expired."""
    return expire_each(
        conn, "SELECT task_id, kind, site, account, updated_at FROM tasks "
        "WHERE status = 'paused' AND updated_at <= ?", (now - ttl,),
        "UPDATE tasks SET status = 'expired', error_code = NULL, error_message = ?, "
        "error_type = NULL, error_traceback = NULL, "
        "updated_at = ?, completed_at = ? WHERE task_id = ? AND status = 'paused'",
        lambda row: f"paused for task_ttl ({ttl:g} s) without being resumed", now)


def next_paused_deadline(conn: Connection, ttl: float) -> float | None:
    """When the longest-paused task reaches ``ttl`` (the paused are few: their index)."""
    row = conn.execute("SELECT min(updated_at) FROM tasks WHERE status = 'paused'").fetchone()
    return None if row[0] is None else float(row[0]) + ttl


def not_before_passed(conn: Connection, after: float, now: float) -> bool:
    """A queued task became leasable in ``(after, now]`` because its not_before passed."""
    row = conn.execute(
        "SELECT 1 FROM tasks WHERE status = 'queued' AND not_before > ? AND not_before <= ? "
        "LIMIT 1", (after, now)
    ).fetchone()
    return row is not None


def next_deadline(conn: Connection, hard_timeout: float, now: float) -> float | None:
    """The earliest claim expiry, lease expiry, hard timeout, TTL or future not_before."""
    row = conn.execute(_NEXT_DEADLINE, (hard_timeout, now)).fetchone()
    return None if row[0] is None else float(row[0])


def existing(conn: Connection, task_ids: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(task_ids), 500):
        chunk = task_ids[start:start + 500]
        found.update(row[0] for row in conn.execute(
            f"SELECT task_id FROM tasks WHERE task_id IN ({marks(chunk)})",
            chunk))
    return found
