"""The schedules actor's timer: it wakes at the earliest ``next_fire_at`` exactly,
claims every fire that is due (a pending fire row, the schedule moved on to its next
cron time, in one transaction), and hands the claimed fires to the submitter once
that commits. Its repair: fires left pending are handed over again.

Fires missed while no gateway ran are made as the schedule's ``catch_up`` says:
``latest`` the most recent one, ``all`` each (the last :data:`MOST_CAUGHT_UP`),
``none`` none. A fire is missed when it is more than :data:`LATE` late; one less late
is simply on time (a busy gateway's timer wakes a little after the minute).
"""

from __future__ import annotations

import logging
import math
from typing import Final

from leasegate.actors.schedules import cron
from leasegate.actors.schedules.records import job_id_of, pending_fire
from leasegate.actors.schedules.turn import SCHEDULES, PendingFire, ScheduleTurn
from leasegate.clock import iso
from leasegate.storage import schedules_sql as sql
from leasegate.storage.engine import Row

log = logging.getLogger("leasegate.schedules")

MOST_CAUGHT_UP: Final = 100
LATE: Final = 60.0
"""Seconds after its time a fire is missed (``catch_up: "none"`` drops it)."""
PENDING_GRACE: Final = 30.0
"""A claimed fire whose outcome is not recorded after this long is handed over again
by ``resend_pending_fires``."""


def on_start(turn: ScheduleTurn) -> None:
    _resend(turn, math.inf)  # every fire a crash may have cut short, again


def next_wakeup(turn: ScheduleTurn) -> float | None:
    return sql.earliest(turn.conn)


def on_wakeup(turn: ScheduleTurn, now: float) -> None:
    claimed: list[PendingFire] = []
    for row in sql.due(turn.conn, now):
        claimed += _claim(turn, row, now)
    turn.after_commit(lambda: _hand_over(turn, claimed, now))


def _claim(turn: ScheduleTurn, row: Row, now: float) -> list[PendingFire]:
    schedule_id, was = row["schedule_id"], row["next_fire_at"]
    times = cron.due_between(row["cron"], row["timezone"], was, now,
                             MOST_CAUGHT_UP if row["catch_up"] == "all" else 1)
    if row["catch_up"] == "none":
        times = [at for at in times if now - at <= LATE]
    # On a wake-up exactly at next_fire_at, times is [next_fire_at].
    if not sql.advance(turn.conn, schedule_id, was,
                       cron.next_after(row["cron"], row["timezone"], now)):
        return []  # moved on since it was read (claimed, paused, put or deleted elsewhere)
    claimed = []
    for at in times:
        job_id = job_id_of(schedule_id, at)
        if not sql.add_fire(turn.conn, schedule_id, at, job_id, now):
            continue  # a trigger in that very second made it
        previous = (sql.previous_job(turn.conn, schedule_id, at) if row["overlap"] == "skip"
                    else None)
        claimed.append(pending_fire(row, at, job_id, previous_job_id=previous))
    sql.trim(turn.conn, schedule_id)
    if len(times) > 1 or (not times and now - was > LATE):
        log.info("schedule %s: %d fires made for the missed time since %s (catch_up %s)",
                 schedule_id, len(times), iso(was), row["catch_up"])
    return claimed


def _hand_over(turn: ScheduleTurn, claimed: list[PendingFire], now: float | None) -> None:
    if now is not None:  # a run of the timer (None: the repair's)
        turn.timer.succeeded(now)
    for item in claimed:
        turn.outbox.put(item)


SCHEDULES.on_start(on_start)
SCHEDULES.deadlines(next_wakeup, on_wakeup)


def resend_pending(turn: ScheduleTurn, now: float) -> None:
    """The periodic job: fires pending past the grace go to the submitter again."""
    _resend(turn, now - PENDING_GRACE)


def _resend(turn: ScheduleTurn, claimed_before: float) -> None:
    rows = sql.pending(turn.conn, claimed_before)
    if not rows:
        return
    log.info("handing %d unfinished schedule fires to the submitter again", len(rows))
    items = [pending_fire(r, r["fire_at"], r["job_id"], previous_job_id=(
        sql.previous_job(turn.conn, r["schedule_id"], r["fire_at"])
        if r["overlap"] == "skip" else None)) for r in rows]
    turn.after_commit(lambda: _hand_over(turn, items, None))
