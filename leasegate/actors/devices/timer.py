"""The device tracker's timer (online → away → gone, each exact) and its repair:
actions left unconfirmed are sent again."""

from __future__ import annotations

import logging
import math
from typing import Final

from leasegate.actors.devices.turn import DEVICES, DeviceTurn, PendingAction
from leasegate.actors.devices.views import DeviceState
from leasegate.logs import escape
from leasegate.storage import devices_sql as sql
from leasegate.storage.engine import Row

log = logging.getLogger("leasegate.devices")

TICK: Final = 0.001
"""How far past a deadline the timer fires: the boundary itself is the device's."""
PENDING_GRACE: Final = 30.0
"""An action not confirmed after this long is sent again by ``device_presence``."""


def on_start(turn: DeviceTurn) -> None:
    _resend(turn, math.inf)  # every action a crash may have cut short, again


def next_wakeup(turn: DeviceTurn) -> float | None:
    due = []
    online = sql.least_seen(turn.conn, "online")
    if online is not None:
        due.append(online + turn.settings.device_pause_after + TICK)
    away = sql.least_seen(turn.conn, "away")
    if away is not None:
        due.append(away + turn.settings.device_cancel_after + TICK)
    # Never in the past: a deadline that rounding put at this instant must not spin.
    return max(min(due), turn.now + TICK) if due else None


def on_wakeup(turn: DeviceTurn, now: float) -> None:
    pause_after = turn.settings.device_pause_after
    cancel_after = turn.settings.device_cancel_after
    # Long silent (the process was down): straight to gone, no pause first.
    for row in sql.silent(turn.conn, "online", now - cancel_after):
        _change(turn, row, "online", "gone")
    for row in sql.silent(turn.conn, "online", now - pause_after):
        _change(turn, row, "online", "away")
    for row in sql.silent(turn.conn, "away", now - cancel_after):
        _change(turn, row, "away", "gone")


DEVICES.on_start(on_start)
DEVICES.deadlines(next_wakeup, on_wakeup)


def _change(turn: DeviceTurn, row: Row, from_state: str, to_state: DeviceState) -> None:
    tenant, device_id, now = row["tenant"], row["device_id"], turn.now
    version = sql.change(turn.conn, tenant, device_id, from_state, to_state, now)
    if version is None:
        return
    log.info("device %s (silent since %s s ago): %s/%s", to_state,
             f"{now - row['last_seen_at']:.0f}", escape(tenant), escape(device_id))
    item = PendingAction(tenant, device_id, to_state, version)
    turn.after_commit(lambda: _changed(turn, item))


def _changed(turn: DeviceTurn, item: PendingAction) -> None:
    turn.transitions[item.state] += 1
    turn.outbox.put(item)


def presence(turn: DeviceTurn, now: float) -> None:
    """The periodic job: actions left unconfirmed past the grace go again."""
    _resend(turn, now - PENDING_GRACE)


def _resend(turn: DeviceTurn, changed_before: float) -> None:
    rows = sql.pending(turn.conn, changed_before)
    if not rows:
        return
    log.info("sending %d unconfirmed device actions again", len(rows))
    items = [PendingAction(r["tenant"], r["device_id"], r["state"], r["version"])
             for r in rows]
    turn.after_commit(lambda: _requeue(turn, items))


def _requeue(turn: DeviceTurn, items: list[PendingAction]) -> None:
    for item in items:
        turn.outbox.put(item)
