"""What a device's presence does to its tasks: a mixin of the task actor.

The device tracker decides the device's state; this applies it to the
device's tasks with the same transitions a client's control uses
(``task_control``), so the rules stay one:

- ``pause`` (away): queued batch tasks → ``paused``; leased and running batch
  tasks get ``pause_requested`` (a worker reports its checkpoint and lets go).
  Tasks without ``batch_total`` do not pause.
- ``resume`` (back): paused tasks → ``queued`` with their checkpoint; a pause
  request not yet honoured is withdrawn.
- ``cancel`` (gone): queued and paused tasks → ``canceled`` at once (settled by
  delivery, as any cancel); a leased task's claim is withdrawn (never started,
  so nothing happened: canceled at once too); running tasks get
  ``cancel_requested``. Stale tasks are left to an operator.

Each is idempotent (a paused task is not paused again, a canceled one is not
canceled again), so the tracker may send an action twice after a crash.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

from leasegate.actors.task_messages import ApplyDeviceAction, ControlAction
from leasegate.logs import escape
from leasegate.storage import devices_sql

log = logging.getLogger("leasegate.tasks")


class DeviceTasks:
    if TYPE_CHECKING:  # provided by TaskControl
        def _apply_control(self, conn: sqlite3.Connection, action: ControlAction,
                           row: sqlite3.Row, now: float, *,
                           by: str | None = None) -> sqlite3.Row | None: ...

    def _device_action(self, conn: sqlite3.Connection, m: ApplyDeviceAction,
                       now: float) -> int:
        if m.action == "pause":
            changed = self._device_pause(conn, m, now)
        elif m.action == "resume":
            changed = self._device_resume(conn, m, now)
        else:
            changed = self._device_cancel(conn, m, now)
        if changed:
            log.info("device %s/%s: %s applied to %d tasks", escape(m.tenant),
                     escape(m.device_id), m.action, changed)
        return changed

    def _by_device(self, conn: sqlite3.Connection, m: ApplyDeviceAction, action: ControlAction,
                   row: sqlite3.Row, now: float) -> bool:
        return self._apply_control(conn, action, row, now,
                                   by=f"device {m.device_id}") is not None

    def _device_pause(self, conn: sqlite3.Connection, m: ApplyDeviceAction, now: float) -> int:
        changed = 0
        for row in devices_sql.tasks_of(conn, m.tenant, m.device_id,
                                        ("queued", "leased", "running")):
            if row["batch_total"] is None or row["pause_requested"]:
                continue
            changed += self._by_device(conn, m, "pause", row, now)
        return changed

    def _device_resume(self, conn: sqlite3.Connection, m: ApplyDeviceAction,
                       now: float) -> int:
        resumed = 0
        for row in devices_sql.tasks_of(conn, m.tenant, m.device_id,
                                        ("paused", "leased", "running")):
            if row["status"] == "paused":
                resumed += self._by_device(conn, m, "resume", row, now)
            elif row["pause_requested"] and row["batch_total"] is not None:
                # Withdraws the request; not counted as resumed.
                self._by_device(conn, m, "resume", row, now)
        return resumed

    def _device_cancel(self, conn: sqlite3.Connection, m: ApplyDeviceAction,
                       now: float) -> int:
        changed = 0
        for row in devices_sql.tasks_of(conn, m.tenant, m.device_id,
                                        ("queued", "paused", "leased", "running")):
            if row["status"] == "running" and row["cancel_requested"]:
                continue
            changed += self._by_device(conn, m, "cancel", row, now)
        return changed
