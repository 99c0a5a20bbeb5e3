"""What happened to a channel's jobs lately, read from its job history (so it
survives a restart, and counts every gateway's work): per minute for the console's
charts, and failures by site for its overview. Each queue serves
:class:`ReadActivity` for its own channel (``reads.serve_reads``)::

    activity = await system.tasks.ask(ReadActivity(now - 3600, now, day_since=now - 86400))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from leasegate.actors.channels import JobQueue
from leasegate.actors.checks import check_int, check_number
from leasegate.actors.queue.turn import QueueTurn
from leasegate.actors.runtime.mailbox import Ask
from leasegate.storage import activity_sql

# A read spans at most a day (the overview's longest figure): one index range each.
MAX_SPAN: Final = 86_400.0
MAX_SITES: Final = 50


@dataclass(frozen=True)
class Minute:
    """One minute's events (``minute``: its start in wall seconds // 60)."""

    minute: int
    submits: int
    completions: int
    dispatches: int  # first leases, whose waits are summed in ``waited`` (seconds)
    waited: float


@dataclass(frozen=True)
class SiteFailures:
    """Jobs of a site that failed or expired in the last hour and the last day."""

    site: str
    failed_hour: int
    expired_hour: int
    failed_day: int
    expired_day: int


@dataclass(frozen=True)
class Activity:
    minutes: tuple[Minute, ...]  # only minutes with events, oldest first
    failures: tuple[SiteFailures, ...]  # the sites with the most, the most first


@dataclass(frozen=True)
class ReadActivity(Ask[JobQueue, Activity]):
    """The channel's minutes from ``since`` to ``until`` (wall seconds), and its
    failures by site since ``day_since`` (of which those since ``hour_since``)."""

    since: float
    until: float
    day_since: float
    hour_since: float
    sites: int = 20

    def check(self) -> None:
        for name in ("since", "until", "day_since", "hour_since"):
            check_number(name, getattr(self, name), 0, 1e12)
        check_number("until - since", self.until - self.since, 0, MAX_SPAN)
        check_number("until - day_since", self.until - self.day_since, 0, MAX_SPAN)
        check_int("sites", self.sites, 1, MAX_SITES)


def read_activity(turn: QueueTurn[Any], m: ReadActivity) -> Activity:
    channel = turn.kind.channel
    minutes = activity_sql.per_minute(turn.conn, channel, m.since, m.until)
    failures = activity_sql.failures_by_site(turn.conn, channel, m.day_since, m.hour_since,
                                             m.until, m.sites)
    return Activity(
        tuple(sorted((Minute(minute=int(r["minute"]), submits=int(r["submits"]),
                             completions=int(r["completions"]),
                             dispatches=int(r["dispatches"]), waited=float(r["waited"]))
                      for r in minutes), key=lambda minute: minute.minute)),
        tuple(SiteFailures(site=str(r["site"]), failed_hour=int(r["failed_recent"]),
                           expired_hour=int(r["expired_recent"]),
                           failed_day=int(r["failed"]), expired_day=int(r["expired"]))
              for r in failures))
