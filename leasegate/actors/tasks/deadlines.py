"""The task actor's timers (claim, lease, hard timeout, TTL and ``not_before``,
each exact) and its purge."""

from __future__ import annotations

import logging

from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.sites import earliest
from leasegate.actors.tasks.turn import TASKS, TaskTurn, requeue_status
from leasegate.clock import iso
from leasegate.logs import escape
from leasegate.storage import presence_sql
from leasegate.storage import tasks_sql as sql
from leasegate.storage.engine import Row

log = logging.getLogger("leasegate.tasks")

PURGE_BATCH = 2000  # rows a purge run deletes; a full batch runs again a second later


def next_wakeup(turn: TaskTurn) -> float | None:
    # A not_before at or before this turn's instant has been handled (no spinning).
    # A throttled site's tokens coming back count too (see queue/sites.py).
    return earliest(sql.next_deadline(turn.conn, turn.settings.task_hard_timeout, turn.now),
                    sql.next_paused_deadline(turn.conn, turn.settings.task_ttl),
                    turn.sites.next_refill())


def on_wakeup(turn: TaskTurn, now: float) -> None:
    conn = turn.conn
    turn.sites.wake_refilled(turn, now)
    for row in sql.lapsed_claims(conn, now):
        # Never started, so provably never executed: back to the queue, silently.
        to = requeue_status(row)
        if sql.back_to_queue(conn, row["task_id"], "leased", row["lease_token"], to, now):
            log.info("task claim expired unstarted, back to %s: task_id=%s worker=%s",
                     to, escape(row["task_id"]), escape(row["lease_owner"]))
            turn.history.record(row["task_id"], "claim_lapsed", worker_id=row["lease_owner"])
            turn.work_may_be_available(*new_work(row["site"]))
    hard_timeout = turn.settings.task_hard_timeout
    for row in sql.past_hard_timeout(conn, now, hard_timeout):
        _make_stale(turn, row, (
            f"hard_timeout: running since {iso(row['started_at'])} under worker "
            f"{row['lease_owner']}, longer than task_hard_timeout ({hard_timeout:g} s)"))
    for row in sql.lapsed_leases(conn, now):
        _make_stale(turn, row, (
            f"lease_expired: worker {row['lease_owner']} stopped renewing at "
            f"{iso(row['renewed_at'])}"))
    for row in sql.expire_past_ttl(conn, now, turn.settings.task_ttl):
        log.warning("task expired unstarted: task_id=%s kind=%s site=%s account=%s",
                    escape(row["task_id"]), escape(row["kind"]), escape(row["site"]),
                    escape(row["account"]))
        turn.history.record(row["task_id"], "expired")
        turn.settle.ended(sql.JOBS.get(conn, row["task_id"]))
    for row in sql.expire_paused(conn, now, turn.settings.task_ttl):
        # The seed's rule: queued, running and paused work all end at a limit.
        log.warning("paused task expired, never resumed: task_id=%s kind=%s site=%s "
                    "paused_since=%s", escape(row["task_id"]), escape(row["kind"]),
                    escape(row["site"]), iso(row["updated_at"]))
        turn.history.record(row["task_id"], "expired")
        turn.settle.ended(sql.JOBS.get(conn, row["task_id"]))
    if sql.not_before_passed(conn, turn.not_before_seen, now):
        turn.work_may_be_available()  # a waiting lease may take it now
    turn.after_commit(lambda: _passed_not_before(turn, now))
    turn.after_commit(lambda: turn.deadline_timer.succeeded(now))


TASKS.deadlines(next_wakeup, on_wakeup)


def _passed_not_before(turn: TaskTurn, now: float) -> None:
    turn.not_before_seen = max(turn.not_before_seen, now)


def _make_stale(turn: TaskTurn, row: Row, reason: str) -> None:
    # Never retried automatically: the write may have happened. The lane stays blocked.
    if sql.make_stale(turn.conn, row["task_id"], row["lease_token"], reason, turn.now):
        log.warning("task stale, lane %s/%s blocked until reclaimed: task_id=%s reason=%s",
                    escape(row["site"]), escape(row["account"]), escape(row["task_id"]),
                    escape(reason))
        turn.history.record(row["task_id"], "stale", reason=reason)


def purge(turn: TaskTurn, now: float) -> bool:
    """Delete finished tasks past retention (each leaves a tombstone that keeps
    its id taken) and tombstones past theirs, a batch at a time; True if more remain."""
    conn = turn.conn
    cutoff = now - turn.settings.task_retention
    purged = sql.JOBS.purge_completed_before(conn, cutoff, now, PURGE_BATCH)
    forgotten_ids = sql.JOBS.purge_tombstones_before(
        conn, now - turn.settings.id_tombstone_retention, PURGE_BATCH)
    more = PURGE_BATCH in (len(purged), forgotten_ids)
    if forgotten_ids:
        log.info("forgot %d task id tombstones past id_tombstone_retention", forgotten_ids)
    if purged:
        log.info("purged %d finished tasks past retention", len(purged))
        store = turn.artifacts
        if store is not None:
            # Files go after the commit, off this path: deleting a big
            # directory here once stalled the whole queue.
            turn.after_commit(lambda: store.discard_later(purged))
    forgotten = presence_sql.purge_workers_before(conn, cutoff)
    if forgotten:
        log.info("forgot %d workers not seen within task_retention", forgotten)
    return more
