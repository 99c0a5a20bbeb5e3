"""The device tracker: end users' devices, online, away or gone, and what that does
to their tasks.

A device (a browser page watching its batch) is seen when it heartbeats or
when a submit names it. Device ids are scoped by tenant. States:

- ``online``: seen within ``device_pause_after``;
- ``away``: silent for more than ``device_pause_after``: its batch tasks pause
  (queued → paused; leased and running get ``pause_requested``);
- ``gone``: silent for more than ``device_cancel_after``: its unfinished tasks
  are canceled (queued, paused and unstarted claims at once, settled by
  delivery; running ones get ``cancel_requested``);
- seen again while away or gone: ``online``, and its paused tasks resume
  (``queued``, with their checkpoint).

Transitions run on the tracker's own timer, which wakes exactly at the next
deadline (the least recently seen online device's pause deadline, the least
recently seen away device's cancel deadline). The boundary belongs to the
device: "silent for more than" is strict, so a device seen at exactly
``last_seen + device_pause_after`` stays online and nothing pauses; the timer
fires :data:`TICK` (1 ms) past the boundary.

The table is bounded by ``device_capacity``: a new device evicts the least
recently seen device that has no live task (queued, leased, running, paused,
stale); when none can go, the new device is refused (429, 6008) and, for a
submit, nothing is enqueued (the sighting comes before the submit).

What the tasks go through is the task actor's (``task_devices``); the tracker
reaches it by messages only, and never the other way round. Each device row
carries a ``version`` (its state changes) and ``pending`` (the action of the
current state not yet confirmed). The crash points and what repairs each:

1. Crash before a transition commits: nothing changed; after restart the
   timer finds the same devices past their deadlines (the deadlines are data)
   and the transition happens then. A heartbeat that got no reply is retried
   by the client.
2. Crash after the transition commits (``pending`` = 1), before the task actor
   has applied its action (pause, resume, cancel): on start-up the tracker
   sends the action of every pending device again, at once.
3. Crash after the task actor commits the action, before the tracker records
   it done: the action is sent again on start-up; the task actor's handling is
   idempotent, so nothing changes twice.
4. A lost message in a running process (the task actor's inbox refusing at
   shutdown, a heartbeat's caller gone while it resumed): ``pending`` stays 1;
   the periodic job ``device_presence`` sends the action of every device
   pending for more than :data:`PENDING_GRACE` again.
5. A device changes state again before the first action was delivered (away,
   then back): only the current state's action matters (resume after a pause
   that never came is a no-op). Actions of one device go to the task actor in
   the order the changes were made (one forwarder, first in first out), and a
   newer change replaces an older one still waiting.

Actions the timer causes (away, gone) are delivered by the forwarder (a
service of the system: :meth:`DeviceTracker.forward_next`). A device that
comes back is resumed by the caller that saw it (:func:`see_device`), so the
heartbeat's reply can say how many tasks were put back in line.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Final

import trio

from leasegate.actors.device_messages import ActionDone, CountDevices, ListDevices, SeeDevice
from leasegate.actors.device_views import (
    DeviceCounts,
    DeviceState,
    Heartbeat,
    Sighted,
    device_view,
)
from leasegate.actors.jobs import JobRecord
from leasegate.actors.legacy_runtime import Actor
from leasegate.actors.mailbox import Ask, Mailbox, Tell
from leasegate.actors.pages import Paged
from leasegate.actors.task_messages import ApplyDeviceAction, DeviceAction
from leasegate.clock import Clock
from leasegate.errors import DeviceLimit, InvalidRequest, LeasegateError
from leasegate.logs import escape
from leasegate.settings import Settings
from leasegate.storage import devices_sql as sql
from leasegate.storage.connection import Database

log = logging.getLogger("leasegate.devices")

TICK: Final = 0.001
"""How far past a deadline the timer fires: the boundary itself is the device's."""
PENDING_GRACE: Final = 30.0
"""An action not confirmed after this long is sent again by ``device_presence``."""
RESUME_SECONDS: Final = 10.0
"""How long a caller that saw a device come back spends resuming its tasks."""
ACTIONS: Final[dict[str, DeviceAction]] = {"online": "resume", "away": "pause",
                                           "gone": "cancel"}

DeviceKey = tuple[str, str]  # (tenant, device_id)


@dataclass(frozen=True)
class PendingAction:
    tenant: str
    device_id: str
    state: DeviceState
    version: int

    @property
    def action(self) -> DeviceAction:
        return ACTIONS[self.state]


class Outbox:
    """Actions waiting for the task actor: one per device (a newer change replaces an
    older one), first in first out. Touched on the trio thread only; its size is
    bounded by the devices table's."""

    def __init__(self) -> None:
        self._items: dict[DeviceKey, PendingAction] = {}
        self._ready = trio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: PendingAction) -> None:
        key = (item.tenant, item.device_id)
        self._items.pop(key, None)
        self._items[key] = item
        self._ready.set()

    def drop(self, key: DeviceKey) -> None:
        self._items.pop(key, None)

    async def take(self) -> PendingAction:
        while not self._items:
            self._ready = trio.Event()
            await self._ready.wait()
        key = next(iter(self._items))
        return self._items.pop(key)


class DeviceTracker(Actor):
    name = "devices"

    def __init__(self, db: Database, clock: Clock, settings: Settings, *,
                 tasks: Mailbox | None = None) -> None:
        super().__init__(db, clock, error_log_window=settings.error_log_window)
        self.settings = settings
        self.tasks = tasks
        self.outbox = Outbox()
        self.forwarder = JobRecord("forward_device_actions", owner=self.name,
                                   every=float("inf"))
        # Counters since start-up (trio thread only, after each commit).
        self.transitions: Counter[str] = Counter()
        self.evictions = 0
        self.refusals = 0
        self.add_job("device_presence", settings.housekeeping_interval, self._presence)

    def handle(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        now = self.now
        match message:
            case SeeDevice():
                return self._see(conn, message.tenant, message.device_id, now)
            case ActionDone():
                return sql.acted(conn, message.tenant, message.device_id, message.version)
            case ListDevices():
                p = message.page
                total, rows = sql.page(conn, message.tenant, p.limit, p.offset)
                items = tuple(device_view(row, row["live_tasks"]) for row in rows)
                return Paged(items, total, p.limit, p.offset)
            case CountDevices():
                return DeviceCounts(sql.by_state(conn), dict(self.transitions),
                                    self.evictions, self.refusals)
        raise InvalidRequest(f"devices: not a device message: {type(message).__name__}")

    # ---- sightings ----

    def _see(self, conn: sqlite3.Connection, tenant: str, device_id: str,
             now: float) -> Sighted:
        key = (tenant, device_id)
        row = sql.get(conn, tenant, device_id)
        if row is None:
            if sql.count(conn) >= self.settings.device_capacity:
                evicted = sql.evict_one(conn)
                if evicted is None:
                    self.after_commit(self._refused)
                    return Sighted(device_id, "online", refused=True)
                gone_key = (evicted["tenant"], evicted["device_id"])
                self.after_commit(lambda: self._evicted(gone_key))
            sql.insert(conn, tenant, device_id, now)
            return Sighted(device_id, "online")
        if row["state"] == "online":
            sql.seen(conn, tenant, device_id, now)
            return Sighted(device_id, "online")
        version = sql.change(conn, tenant, device_id, row["state"], "online", now, seen_at=now)
        assert version is not None  # this turn read the row: nobody else writes it
        log.info("device back (was %s): %s/%s", row["state"], escape(tenant), escape(device_id))
        # The caller resumes its tasks itself; an older action still waiting is moot.
        self.after_commit(lambda: self._came_back(key))
        return Sighted(device_id, "online", came_back=True, version=version)

    def _refused(self) -> None:
        self.refusals += 1

    def _evicted(self, key: DeviceKey) -> None:
        self.evictions += 1
        self.outbox.drop(key)

    def _came_back(self, key: DeviceKey) -> None:
        self.transitions["back"] += 1
        self.outbox.drop(key)

    # ---- the timer ----

    def on_start(self, conn: sqlite3.Connection) -> None:
        self._resend(conn, math.inf)  # every action a crash may have cut short, again

    def next_wakeup(self, conn: sqlite3.Connection) -> float | None:
        due = []
        online = sql.least_seen(conn, "online")
        if online is not None:
            due.append(online + self.settings.device_pause_after + TICK)
        away = sql.least_seen(conn, "away")
        if away is not None:
            due.append(away + self.settings.device_cancel_after + TICK)
        # Never in the past: a deadline that rounding put at this instant must not spin.
        return max(min(due), self.now + TICK) if due else None

    def on_wakeup(self, conn: sqlite3.Connection, now: float) -> None:
        pause_after = self.settings.device_pause_after
        cancel_after = self.settings.device_cancel_after
        # Long silent (the process was down): straight to gone, no pause first.
        for row in sql.silent(conn, "online", now - cancel_after):
            self._change(conn, row, "online", "gone", now)
        for row in sql.silent(conn, "online", now - pause_after):
            self._change(conn, row, "online", "away", now)
        for row in sql.silent(conn, "away", now - cancel_after):
            self._change(conn, row, "away", "gone", now)

    def _change(self, conn: sqlite3.Connection, row: sqlite3.Row, from_state: str,
                to_state: DeviceState, now: float) -> None:
        tenant, device_id = row["tenant"], row["device_id"]
        version = sql.change(conn, tenant, device_id, from_state, to_state, now)
        if version is None:
            return
        log.info("device %s (silent since %s s ago): %s/%s", to_state,
                 f"{now - row['last_seen_at']:.0f}", escape(tenant), escape(device_id))
        item = PendingAction(tenant, device_id, to_state, version)
        self.after_commit(lambda: self._changed(item))

    def _changed(self, item: PendingAction) -> None:
        self.transitions[item.state] += 1
        self.outbox.put(item)

    # ---- repair ----

    def _presence(self, conn: sqlite3.Connection, now: float) -> None:
        """The periodic job: actions left unconfirmed past the grace go again."""
        self._resend(conn, now - PENDING_GRACE)

    def _resend(self, conn: sqlite3.Connection, changed_before: float) -> None:
        rows = sql.pending(conn, changed_before)
        if not rows:
            return
        log.info("sending %d unconfirmed device actions again", len(rows))
        items = [PendingAction(r["tenant"], r["device_id"], r["state"], r["version"])
                 for r in rows]
        self.after_commit(lambda: self._requeue(items))

    def _requeue(self, items: list[PendingAction]) -> None:
        for item in items:
            self.outbox.put(item)

    # ---- the forwarder (a service of the system) ----

    async def forward_next(self) -> bool:
        """Deliver the next waiting action to the task actor, then record it done."""
        item = await self.outbox.take()
        if self.tasks is not None:
            await self.tasks.ask(ApplyDeviceAction(item.tenant, item.device_id, item.action))
        await self.mailbox.ask(ActionDone(item.tenant, item.device_id, item.version))
        return True


async def see_device(devices: Mailbox, tasks: Mailbox, tenant: str,
                     device_id: str) -> Heartbeat:
    """A sighting (a heartbeat, or a submit naming the device): online from now; if it
    was away or gone, its paused tasks resume before this returns. 6008 when the table
    is full of devices with live tasks."""
    sighted = await devices.ask(SeeDevice(tenant, device_id))
    if sighted.refused:
        raise DeviceLimit(f"the device table is full: every device in it has unfinished "
                          f"tasks; device {device_id} is not tracked (retry once tasks "
                          "finish)")
    resumed = 0
    if sighted.came_back:
        # Shielded: a caller that leaves now must not leave the tasks paused (the
        # presence job would resume them, but later).
        with trio.move_on_after(RESUME_SECONDS, shield=True):
            try:
                resumed = await tasks.ask(ApplyDeviceAction(tenant, device_id, "resume"))
                await devices.ask(ActionDone(tenant, device_id, sighted.version))
            except LeasegateError as exc:
                log.warning("device %s/%s back, its tasks not resumed yet (the presence "
                            "job will): %s", escape(tenant), escape(device_id), exc)
    return Heartbeat(device_id, "online", resumed)
