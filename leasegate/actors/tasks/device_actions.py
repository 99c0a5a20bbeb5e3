"""What a device's presence does to its tasks: the message and its handler.

The device tracker decides the device's state; this applies it to the
device's tasks with the same transitions a client's control uses
(``control.py``), so the rules stay one:

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
from dataclasses import dataclass

from leasegate.actors.checks import check_choice, check_id
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.control import ControlAction, apply_control
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.logs import escape
from leasegate.storage import devices_sql
from leasegate.storage.engine import Row

log = logging.getLogger("leasegate.tasks")

DeviceAction = ControlAction  # what a device's presence does to its tasks


@dataclass(frozen=True)
class ApplyDeviceAction(Ask[Tasks, int]):
    """What a device's change means for its tasks (sent by the device tracker, or by
    the route that saw the device come back): ``pause`` its batch tasks (away),
    ``resume`` its paused ones (back), ``cancel`` its unfinished ones (gone).
    Idempotent: sent again, it changes nothing more. The reply counts the tasks
    changed (for ``resume``: the paused tasks put back in line)."""

    tenant: str
    device_id: str
    action: DeviceAction

    def check(self) -> None:
        check_id("tenant", self.tenant)
        check_id("device_id", self.device_id)
        check_choice("action", self.action, DeviceAction)


@TASKS.on(ApplyDeviceAction)
def apply_device_action(turn: TaskTurn, m: ApplyDeviceAction) -> int:
    act = {"pause": _pause, "resume": _resume, "cancel": _cancel}[m.action]
    changed = act(turn, m)
    if changed:
        log.info("device %s/%s: %s applied to %d tasks", escape(m.tenant),
                 escape(m.device_id), m.action, changed)
    return changed


def _by_device(turn: TaskTurn, m: ApplyDeviceAction, action: ControlAction, row: Row) -> bool:
    return apply_control(turn, action, row, by=f"device {m.device_id}") is not None


def _tasks_of(turn: TaskTurn, m: ApplyDeviceAction, statuses: tuple[str, ...]) -> list[Row]:
    return devices_sql.tasks_of(turn.conn, m.tenant, m.device_id, statuses)


def _pause(turn: TaskTurn, m: ApplyDeviceAction) -> int:
    changed = 0
    for row in _tasks_of(turn, m, ("queued", "leased", "running")):
        if row["batch_total"] is None or row["pause_requested"]:
            continue
        changed += _by_device(turn, m, "pause", row)
    return changed


def _resume(turn: TaskTurn, m: ApplyDeviceAction) -> int:
    resumed = 0
    for row in _tasks_of(turn, m, ("paused", "leased", "running")):
        if row["status"] == "paused":
            resumed += _by_device(turn, m, "resume", row)
        elif row["pause_requested"] and row["batch_total"] is not None:
            # Withdraws the request; not counted as resumed.
            _by_device(turn, m, "resume", row)
    return resumed


def _cancel(turn: TaskTurn, m: ApplyDeviceAction) -> int:
    changed = 0
    for row in _tasks_of(turn, m, ("queued", "paused", "leased", "running")):
        if row["status"] == "running" and row["cancel_requested"]:
            continue
        changed += _by_device(turn, m, "cancel", row)
    return changed
