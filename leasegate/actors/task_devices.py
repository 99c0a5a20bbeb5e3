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

from leasegate.actors.task_messages import ApplyDeviceAction
from leasegate.logs import escape
from leasegate.storage import devices_sql
from leasegate.storage import tasks_sql as sql

if TYPE_CHECKING:
    from collections.abc import Callable

    from leasegate.actors.billing import SettleNotices
    from leasegate.actors.history import JobHistory

log = logging.getLogger("leasegate.tasks")


class DeviceTasks:
    if TYPE_CHECKING:  # provided by TaskQueue and TaskControl
        settle: SettleNotices
        history: JobHistory

        def _current(self, conn: sqlite3.Connection, task_id: str) -> sqlite3.Row: ...
        def _cancel(self, conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> bool: ...
        def _pause(self, conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> bool: ...
        def _resume(self, conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> bool: ...

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

    def _device_control(self, conn: sqlite3.Connection, m: ApplyDeviceAction,
                        row: sqlite3.Row, act: Callable[[sqlite3.Connection, sqlite3.Row, float],
                                                        bool],
                        action: str, now: float) -> bool:
        """One control transition, written to the task's history as the device's doing."""
        if not act(conn, row, now):
            return False
        self.history.controlled(conn, action, row, self._current(conn, row["task_id"]),
                                by=f"device {m.device_id}")
        return True

    def _device_pause(self, conn: sqlite3.Connection, m: ApplyDeviceAction, now: float) -> int:
        changed = 0
        for row in devices_sql.tasks_of(conn, m.tenant, m.device_id,
                                        ("queued", "leased", "running")):
            if row["batch_total"] is None or row["pause_requested"]:
                continue
            changed += self._device_control(conn, m, row, self._pause, "pause", now)
        return changed

    def _device_resume(self, conn: sqlite3.Connection, m: ApplyDeviceAction,
                       now: float) -> int:
        resumed = 0
        for row in devices_sql.tasks_of(conn, m.tenant, m.device_id,
                                        ("paused", "leased", "running")):
            if row["status"] == "paused":
                resumed += self._device_control(conn, m, row, self._resume, "resume", now)
            elif row["pause_requested"] and row["batch_total"] is not None:
                # Withdraws the request; not counted as resumed.
                self._device_control(conn, m, row, self._resume, "resume", now)
        return resumed

    def _device_cancel(self, conn: sqlite3.Connection, m: ApplyDeviceAction,
                       now: float) -> int:
        changed = 0
        for row in devices_sql.tasks_of(conn, m.tenant, m.device_id,
                                        ("queued", "paused", "leased", "running")):
            if row["status"] == "running" and row["cancel_requested"]:
                continue
            if self._device_control(conn, m, row, self._cancel, "cancel", now):
                changed += 1
                self.settle.ended(self._current(conn, row["task_id"]), sql.TERMINAL)
        return changed
