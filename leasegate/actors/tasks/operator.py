"""An operator's actions on tasks and sites: retry one task and find what a redrive
retries (handled as on both channels, ``queue.retry``), and the sites' dispatch
controls, each message followed by its handler (the task actor owns the ``sites``
table; the query actor is handed each change).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal

from leasegate.actors.checks import MAX_TEXT, check_choice, check_id, check_text
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.retry import FindRetryable, RetryJob, serve_retries
from leasegate.actors.queue.sites import (
    QueuedAt,
    SiteBacklog,
    SiteControl,
    backlogs,
    check_rate,
    check_reason,
    site_control,
)
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.turn import TASKS, TaskTurn
from leasegate.actors.tasks.views import TaskView
from leasegate.logs import escape
from leasegate.storage import lanes_sql
from leasegate.storage import operator_sql as sql

log = logging.getLogger("leasegate.operator")

SiteAction = Literal["pause", "resume", "throttle"]


@dataclass(frozen=True)
class RetryTask(RetryJob[Tasks, TaskView]):
    """A failed, expired or canceled task back to ``queued``, a new attempt."""


@dataclass(frozen=True)
class RetryTasks(Batch[Tasks, RetryTask, TaskView]):
    """A redrive's retries (up to 100 a message), each on its own."""

    item = RetryTask


@dataclass(frozen=True)
class FindRetryableTasks(FindRetryable[Tasks]):
    statuses: ClassVar[tuple[str, ...]] = ("failed", "expired", "canceled")


serve_retries(TASKS, RetryTask, RetryTasks, FindRetryableTasks)


# ---- sites ---------------------------------------------------------------------------

@dataclass(frozen=True)
class SetSite(Ask[Tasks, SiteControl]):
    """Pause or resume a site (with why), or set its lease rate (None lifts it)."""

    site: str
    action: SiteAction
    by: str
    reason: str | None = None
    leases_per_second: float | None = None

    def check(self) -> None:
        check_id("site", self.site)
        check_choice("action", self.action, SiteAction)
        check_text("by", self.by, empty=False, most=MAX_TEXT)
        if self.action == "throttle":
            check_rate(self.leases_per_second)
            check_text("reason", self.reason, optional=True, most=500)
        else:
            check_reason(self.reason)


@TASKS.on(SetSite)
def set_site(turn: TaskTurn, m: SetSite) -> SiteControl:
    row = sql.site_control(turn.conn, m.site)
    old = SiteControl(m.site) if row is None else site_control(row)
    paused, rate, reason = old.paused, old.leases_per_second, old.reason
    if m.action == "throttle":
        rate = m.leases_per_second
    else:
        paused, reason = m.action == "pause", m.reason
    sql.set_site(turn.conn, m.site, paused=paused, reason=reason, by=m.by,
                 leases_per_second=rate, now=turn.now)
    control = SiteControl(m.site, paused, rate, reason, m.by, turn.now)
    if turn.sites.apply(control):
        turn.work_may_be_available(*new_work(m.site))
    log.warning("site %s: %s by %s (paused=%s leases_per_second=%s reason=%s)",
                escape(m.site), m.action, escape(m.by), paused, rate, escape(reason or "-"))
    return control


@dataclass(frozen=True)
class ListSiteControls(Ask[Tasks, tuple[SiteControl, ...]]):
    """Every site an operator paused or throttled."""


@TASKS.on(ListSiteControls)
def site_controls(turn: TaskTurn, m: ListSiteControls) -> tuple[SiteControl, ...]:
    return tuple(site_control(row) for row in sql.site_controls(turn.conn))


@dataclass(frozen=True)
class ReloadSiteControls(Ask[Tasks, tuple[SiteControl, ...]]):
    """Take the controls as the database has them now (another gateway of a PostgreSQL
    database may have changed them); the ones that changed, for the query actor."""


@TASKS.on(ReloadSiteControls)
def reload_site_controls(turn: TaskTurn, m: ReloadSiteControls) -> tuple[SiteControl, ...]:
    gate = turn.sites
    kept = {row["site"]: site_control(row) for row in sql.site_controls(turn.conn)}
    # A site resumed and unthrottled has no row: it is controlled no more.
    lifted = (gate.paused | set(gate.rates)) - set(kept)
    changed = tuple(
        control for control in (*kept.values(), *(SiteControl(site) for site in sorted(lifted)))
        if (control.paused, control.leases_per_second)
        != (control.site in gate.paused, gate.rates.get(control.site)))
    for control in changed:
        if gate.apply(control):
            turn.work_may_be_available(*new_work(control.site))
    return changed


def load_sites(turn: TaskTurn) -> None:
    """At start-up: the controls kept in the database."""
    turn.sites.load(site_control(row) for row in sql.site_controls(turn.conn))


TASKS.on_start(load_sites)


@dataclass(frozen=True)
class TasksQueuedAt(QueuedAt[Tasks]):
    """Queued tasks of each of these sites."""


@TASKS.on(TasksQueuedAt)
def queued_at(turn: TaskTurn, m: TasksQueuedAt) -> tuple[SiteBacklog, ...]:
    return backlogs(turn, "task", m.sites, lanes_sql.backlog)
