"""The query actor's timers (lease and TTL expiries, exact) and its purge."""

from __future__ import annotations

import logging

from leasegate.actors.attempts import AttemptError, with_error
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.sites import earliest
from leasegate.logs import escape
from leasegate.storage import queries_sql as sql

log = logging.getLogger("leasegate.queries")

LEASE_EXPIRED = "lease_expired"
"""The ``type`` of the error a lapsed lease leaves in a query's ``errors``."""
PURGE_BATCH = 2000  # rows a purge run deletes; a full batch runs again a second later


def next_wakeup(turn: QueryTurn) -> float | None:
    # A throttled site's tokens coming back count too (see queue/sites.py).
    return earliest(sql.next_deadline(turn.conn), turn.sites.next_refill())


def on_wakeup(turn: QueryTurn, now: float) -> None:
    conn = turn.conn
    turn.sites.wake_refilled(turn, now)
    # TTL first: a query past its TTL is pointless to rerun.
    for row in sql.expire_past_ttl(conn, now):
        log.warning("query expired: query_id=%s kind=%s", escape(row["query_id"]),
                    escape(row["kind"]))
        turn.history.record(row["query_id"], "expired")
        turn.settle.ended(sql.JOBS.get(conn, row["query_id"]))
    for row in sql.lapsed_leases(conn, now):
        query_id, attempts = row["query_id"], row["attempts"]
        # a lapsed lease is an attempt that ended without a result: its error is kept
        errors = with_error(row["errors"], AttemptError(
            attempts, now, row["lease_owner"], None, LEASE_EXPIRED,
            "the lease expired without a result", None))
        if attempts >= (row["max_attempts"] or turn.settings.query_max_attempts):
            sql.fail_exhausted(conn, query_id, attempts, errors, now)
            turn.history.record(query_id, "lease_expired", attempts=attempts)
            turn.settle.ended(sql.JOBS.get(conn, query_id))
            log.warning("query attempts exhausted, failed: query_id=%s attempts=%s",
                        escape(query_id), attempts)
        else:
            # Read-only work is safe to run again: this is the difference from tasks.
            sql.requeue(conn, query_id, errors, now)
            turn.history.record(query_id, "lease_expired", attempts=attempts)
            log.info("query lease expired, redelivering: query_id=%s attempts=%s",
                     escape(query_id), attempts)
            turn.work_may_be_available(*new_work(row["site"]))
    # Queries whose wait for a retry is over: leasable now, the waiting leases woken.
    for site in set(sql.due_retries(conn, now)):
        turn.work_may_be_available(*new_work(site))


QUERIES.deadlines(next_wakeup, on_wakeup)


def purge(turn: QueryTurn, now: float) -> bool:
    """Delete finished queries past retention (each leaves a tombstone that keeps
    its id taken) and tombstones past theirs, a batch at a time; True if more remain."""
    purged = len(sql.JOBS.purge_completed_before(
        turn.conn, now - turn.settings.query_retention, now, PURGE_BATCH))
    forgotten = sql.JOBS.purge_tombstones_before(
        turn.conn, now - turn.settings.id_tombstone_retention, PURGE_BATCH)
    if purged:
        log.info("purged %d finished queries past retention", purged)
    if forgotten:
        log.info("forgot %d query id tombstones past id_tombstone_retention", forgotten)
    return PURGE_BATCH in (purged, forgotten)
