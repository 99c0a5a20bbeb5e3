"""Messages of the schedules actor, each followed by its handler: what the HTTP layer,
the CLI and the fire submitter may ask of it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from leasegate.actors.checks import check_choice, check_flag, check_id
from leasegate.actors.pages import Paged, TenantPage, paged
from leasegate.actors.payloads import canonical_json
from leasegate.actors.queries.submit import SubmitQuery
from leasegate.actors.queue.submissions import Submit
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.schedules import Schedules, cron
from leasegate.actors.schedules.turn import (
    SCHEDULES,
    CatchUp,
    Channel,
    FireStatus,
    Overlap,
    PendingFire,
    ScheduleTurn,
)
from leasegate.actors.schedules.views import SchedulePut, ScheduleView, schedule_view
from leasegate.actors.tasks.submit import SubmitTask
from leasegate.actors.views import JSONObject, loads
from leasegate.clock import iso
from leasegate.errors import InvalidRequest, NotFound, StateConflict
from leasegate.storage import schedules_sql as sql
from leasegate.storage.engine import Row

MAX_SCHEDULE_ID: Final = 43
"""A fire's job id is ``<schedule_id>@<fire time>``: 43 + 21 characters, the 64 of an id."""
NOT_IN_TEMPLATES: Final = ("task_id", "query_id", "not_before", "device_id")
"""Submit fields a template may not carry: each fire names its own job, is due at its
fire time, and sights no end user's device."""


def submit_of(channel: Channel, tenant: str, job_id: str,
              template: JSONObject) -> Submit[Any, Any]:
    """The submit a fire of ``template`` makes (400 for a field no submit of the
    channel has)."""
    refused = [name for name in NOT_IN_TEMPLATES if name in template]
    if refused:
        raise InvalidRequest(f"template must not carry {', '.join(refused)}: each fire "
                             "submits the job <schedule_id>@<fire time>, due at once")
    try:
        if channel == "task":
            return SubmitTask(tenant=tenant, task_id=job_id, **template)  # type: ignore[arg-type]
        return SubmitQuery(tenant=tenant, query_id=job_id, **template)  # type: ignore[arg-type]
    except TypeError as exc:
        raise InvalidRequest(f"template: not a field of a {channel} submit ({exc})") from exc


def job_id_of(schedule_id: str, fire_at: float) -> str:
    """``<schedule_id>@2026-12-08T02:00:00Z``: the fire time in UTC, whole seconds."""
    return f"{schedule_id}@{iso(fire_at)}"


def check_schedule_id(value: object) -> None:
    check_id("schedule_id", value)
    assert isinstance(value, str)
    if len(value) > MAX_SCHEDULE_ID:
        raise InvalidRequest(f"schedule_id must be at most {MAX_SCHEDULE_ID} characters: "
                             "its fires' job ids add @ and the fire time (21)")


@dataclass(frozen=True)
class PutSchedule(Ask[Schedules, SchedulePut]):
    """Create or replace ``schedule_id`` (its fires so far are kept)."""

    tenant: str
    schedule_id: str
    cron: str
    channel: Channel
    template: JSONObject = field(default_factory=dict)
    timezone: str = "UTC"
    overlap: Overlap = "skip"
    catch_up: CatchUp = "latest"
    paused: bool = False

    def check(self) -> None:
        check_id("tenant", self.tenant)
        check_schedule_id(self.schedule_id)
        check_choice("channel", self.channel, Channel)
        check_choice("overlap", self.overlap, Overlap)
        check_choice("catch_up", self.catch_up, CatchUp)
        check_flag("paused", self.paused)
        cron.check_cron(self.cron)
        cron.zone(self.timezone)
        if not isinstance(self.template, dict):
            raise InvalidRequest("template must be a JSON object: a submit body without "
                                 "its id")
        # As a submit of the channel would be checked, under a fire's job id.
        submit_of(self.channel, self.tenant, job_id_of(self.schedule_id, 0.0),
                  self.template).check()


@SCHEDULES.on(PutSchedule)
def put(turn: ScheduleTurn, m: PutSchedule) -> SchedulePut:
    row, now = sql.get(turn.conn, m.schedule_id), turn.now
    if row is not None and row["tenant"] != m.tenant:
        raise StateConflict(f"schedule id {m.schedule_id} is taken: a schedule's fires "
                            "name their jobs by it, and job ids are one namespace; "
                            "choose another")
    if row is None and sql.count_of(turn.conn, m.tenant) >= (
            most := turn.settings.max_schedules_per_tenant):
        raise StateConflict(f"tenant {m.tenant} has {most} schedules, the most "
                            "max_schedules_per_tenant allows: delete one first")
    fields = {
        "cron": m.cron, "timezone": m.timezone, "channel": m.channel,
        "template": canonical_json(m.template), "overlap": m.overlap,
        "catch_up": m.catch_up, "paused": int(m.paused),
        "next_fire_at": None if m.paused else cron.next_after(m.cron, m.timezone, now),
        "updated_at": now}
    if row is None:
        sql.insert(turn.conn, {"schedule_id": m.schedule_id, "tenant": m.tenant,
                               "created_at": now, **fields})
    else:
        sql.update(turn.conn, m.schedule_id, fields)
    return SchedulePut(_view(turn, m.schedule_id), created=row is None)


R = TypeVar("R")


@dataclass(frozen=True)
class Named(Ask[Schedules, R]):
    """A message about one schedule of ``tenant`` (None: anyone's, for an admin);
    another tenant's is 404."""

    schedule_id: str
    tenant: str | None = None

    def check(self) -> None:
        check_id("schedule_id", self.schedule_id)
        check_id("tenant", self.tenant, optional=True)


@dataclass(frozen=True)
class GetSchedule(Named[ScheduleView]):
    """A schedule."""


@SCHEDULES.on(GetSchedule)
def get(turn: ScheduleTurn, m: GetSchedule) -> ScheduleView:
    _row(turn, m)
    return _view(turn, m.schedule_id)


@dataclass(frozen=True)
class ListSchedules(TenantPage[Schedules, ScheduleView]):
    """A tenant's schedules (None: everyone's), newest first."""


@SCHEDULES.on(ListSchedules)
def list_schedules(turn: ScheduleTurn, m: ListSchedules) -> Paged[ScheduleView]:
    total, rows = sql.page(turn.conn, m.tenant, m.page.limit, m.page.offset)
    fires = sql.fires_of(turn.conn, [row["schedule_id"] for row in rows])
    return paged((total, rows),
                 lambda row: schedule_view(row, fires.get(row["schedule_id"], [])), m.page)


@dataclass(frozen=True)
class DeleteSchedule(Named[None]):
    """Delete a schedule and its fires (a fire already claimed may still submit)."""


@SCHEDULES.on(DeleteSchedule)
def delete(turn: ScheduleTurn, m: DeleteSchedule) -> None:
    _row(turn, m)
    sql.delete(turn.conn, m.schedule_id)


@dataclass(frozen=True)
class PauseSchedule(Named[ScheduleView]):
    """No fires while paused; resumed, it fires from its next cron time after now
    (the times it spent paused are not caught up)."""

    paused: bool = True

    def check(self) -> None:
        super().check()
        check_flag("paused", self.paused)


@SCHEDULES.on(PauseSchedule)
def pause(turn: ScheduleTurn, m: PauseSchedule) -> ScheduleView:
    row = _row(turn, m)
    if bool(row["paused"]) != m.paused:
        then = None if m.paused else cron.next_after(row["cron"], row["timezone"], turn.now)
        sql.update(turn.conn, m.schedule_id, {"paused": int(m.paused), "next_fire_at": then,
                                              "updated_at": turn.now})
    return _view(turn, m.schedule_id)


@dataclass(frozen=True)
class TriggerSchedule(Named[PendingFire]):
    """Fire now (paused or not, whatever the overlap: an explicit request); the fire's
    time is this second. Two triggers in one second are one fire."""


@SCHEDULES.on(TriggerSchedule)
def trigger(turn: ScheduleTurn, m: TriggerSchedule) -> PendingFire:
    row = _row(turn, m)
    fire_at = float(math.floor(turn.now))
    job_id = job_id_of(m.schedule_id, fire_at)
    sql.add_fire(turn.conn, m.schedule_id, fire_at, job_id, turn.now)
    sql.trim(turn.conn, m.schedule_id)
    return pending_fire(row, fire_at, job_id, previous_job_id=None)


@dataclass(frozen=True)
class FireDone(Ask[Schedules, bool]):
    """A fire's outcome (``submitted``, ``skipped`` or ``failed`` with its error);
    False if another gateway recorded it first."""

    schedule_id: str
    fire_at: float
    status: str
    error: JSONObject | None = None

    def check(self) -> None:
        check_id("schedule_id", self.schedule_id)
        check_choice("status", self.status, FireStatus)


@SCHEDULES.on(FireDone)
def fire_done(turn: ScheduleTurn, m: FireDone) -> bool:
    error = None if m.error is None else canonical_json(m.error)
    done = sql.fire_done(turn.conn, m.schedule_id, m.fire_at, m.status, error)
    sql.trim(turn.conn, m.schedule_id)
    return done


def pending_fire(row: Row, fire_at: float, job_id: str, *,
                 previous_job_id: str | None) -> PendingFire:
    return PendingFire(row["tenant"], row["schedule_id"], fire_at, job_id, row["channel"],
                       loads(row["template"]), previous_job_id)


def _row(turn: ScheduleTurn, m: Named[Any]) -> Row:
    row = sql.get(turn.conn, m.schedule_id)
    if row is None or (m.tenant is not None and row["tenant"] != m.tenant):
        raise NotFound(f"no schedule {m.schedule_id}")
    return row


def _view(turn: ScheduleTurn, schedule_id: str) -> ScheduleView:
    row = sql.get(turn.conn, schedule_id)
    assert row is not None
    return schedule_view(row, sql.fires(turn.conn, schedule_id))
