"""Periodic runs: one gateway runs each due run of a periodic job (``periodic_runs``).

Every gateway of one database keeps the same timers; when a job's timer fires, the
gateway first *claims* the run::

    if periodic_sql.claim(conn, "tasks.purge", "gw-a:8470", now, every=60.0):
        ...  # run it
    else:
        by, at = periodic_sql.last_run(conn, "tasks.purge")  # another gateway ran it

A claim is one upsert that moves the job's ``due_at`` on, conditional on it being due:
SQLite runs it under its single writer; PostgreSQL locks the row and re-checks the
condition against its latest version, so among gateways claiming at once exactly one
changes the row (rowcount 1) and the others change nothing. A run that fails rolls its
claim back with it (inside an actor's turn) or gives it back (:func:`due_again`), so
another gateway may run it at once.
"""

from __future__ import annotations

from leasegate.storage.engine import Connection

# Claimable a little before the interval is over, so that the gateway that ran the last
# run, whose timer fires exactly one interval later, finds it due despite rounding.
SLACK_FRACTION = 0.1
MAX_SLACK = 1.0

_CLAIM = (
    "INSERT INTO periodic_runs (job, due_at, run_by, run_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (job) DO UPDATE SET due_at = excluded.due_at, run_by = excluded.run_by, "
    "run_at = excluded.run_at "
    # Due; or due so far ahead that the clock went back (an NTP step, a restored
    # backup): a job must never wait more than an interval.
    "WHERE periodic_runs.due_at <= ? OR periodic_runs.due_at > ?"
)


def claim(conn: Connection, job: str, gateway: str, now: float, every: float) -> bool:
    """Claim the run of ``job`` due at ``now`` for ``gateway``; True if it is this
    gateway's to run, False if another gateway ran it less than an interval ago."""
    due_at = now + every - min(MAX_SLACK, every * SLACK_FRACTION)
    cur = conn.execute(_CLAIM, (job, due_at, gateway, now, now, now + every))
    return cur.rowcount == 1


def due_again(conn: Connection, job: str, due_at: float) -> None:
    """Make ``job`` due at ``due_at`` (a run that has more to do, a run that failed)."""
    conn.execute("UPDATE periodic_runs SET due_at = ? WHERE job = ?", (due_at, job))


def last_run(conn: Connection, job: str) -> tuple[str, float] | None:
    """``(gateway, when)`` of the last claimed run of ``job``; None if it never ran."""
    row = conn.execute("SELECT run_by, run_at FROM periodic_runs WHERE job = ?",
                       (job,)).fetchone()
    return None if row is None else (str(row["run_by"]), float(row["run_at"]))
