"""Replies of the schedules actor, built from its rows; rendered to JSON at the edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from leasegate.actors.views import Instant, JSONObject, loads
from leasegate.storage.engine import Row


@dataclass(frozen=True)
class FireError:
    """Why a fire made no job: the submit's refusal (e.g. 6007, insufficient_funds)."""

    code: int
    type: str
    message: str


@dataclass(frozen=True)
class FireView:
    """One fire: ``pending`` from its claim until its submit's outcome, then
    ``submitted`` (the job exists), ``skipped`` (overlap "skip": the previous fire's
    job was unfinished) or ``failed`` (refused: ``error`` says why)."""

    fire_at: Instant
    job_id: str
    status: Literal["pending", "submitted", "skipped", "failed"]
    error: FireError | None


@dataclass(frozen=True)
class ScheduleView:
    schedule_id: str
    tenant: str
    cron: str
    timezone: str
    channel: Literal["task", "query"]
    template: JSONObject
    overlap: Literal["skip", "allow"]
    catch_up: Literal["latest", "none", "all"]
    paused: bool
    next_fire_at: Instant | None
    fires: tuple[FireView, ...] = field(metadata={"description": "The last 20, newest first."})
    created_at: Instant
    updated_at: Instant


@dataclass(frozen=True)
class SchedulePut:
    """A PUT's answer: the schedule, and whether it was created (else replaced)."""

    schedule: ScheduleView
    created: bool


def fire_view(row: Row) -> FireView:
    error = loads(row["error"])
    return FireView(row["fire_at"], row["job_id"], row["status"],
                    None if error is None else FireError(**error))


def schedule_view(row: Row, fires: list[Row]) -> ScheduleView:
    return ScheduleView(
        row["schedule_id"], row["tenant"], row["cron"], row["timezone"], row["channel"],
        loads(row["template"]), row["overlap"], row["catch_up"], bool(row["paused"]),
        row["next_fire_at"], tuple(fire_view(f) for f in fires), row["created_at"],
        row["updated_at"])
