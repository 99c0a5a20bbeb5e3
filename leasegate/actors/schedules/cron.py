"""Cron times of a schedule, by cronsim (the cron evaluator of Healthchecks.io: five
fields, no dependencies, typed).

Times are wall seconds (UTC); cron fields are read in the schedule's IANA time zone.
Daylight-saving changes follow cronsim's documented rule, Debian cron's: a time the
clock skips (02:30 on a spring-forward day) fires at the first minute after the gap
(03:00 local); a time the clock passes twice (01:30 on a fall-back day) fires once, the
first time, unless the hour field is a wildcard (``*/30 * * * *`` fires in both
passes, as the clock really shows each of its minutes twice).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from leasegate.errors import InvalidRequest

CRON_FIELDS: Final = 5
MAX_TIMEZONE: Final = 64


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; 400 when there is none of that name."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_TIMEZONE:
        raise InvalidRequest(f"timezone must be an IANA time zone name of 1-{MAX_TIMEZONE} "
                             "characters, e.g. UTC or Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError) as exc:  # not found is a KeyError
        raise InvalidRequest(f"timezone {name!r} is not an IANA time zone name, "
                             "e.g. UTC or Europe/Berlin") from exc


def check_cron(cron: object, timezone: str) -> None:
    """400 unless ``cron`` is five cron fields that can fire, in ``timezone``."""
    if not isinstance(cron, str) or len(cron) > 200 or len(cron.split()) != CRON_FIELDS:
        raise InvalidRequest("cron must be five fields (minute hour day-of-month month "
                             "day-of-week), e.g. \"0 2 * * *\"")
    try:
        CronSim(cron, datetime.now(zone(timezone)))
    except CronSimError as exc:
        raise InvalidRequest(f"cron {cron!r}: {exc}") from exc


def next_after(cron: str, timezone: str, after: float) -> float | None:
    """The first cron time strictly after ``after``; None if there is none (a date
    such as 31 April never comes)."""
    start = datetime.fromtimestamp(after, zone(timezone))
    try:
        return next(CronSim(cron, start)).timestamp()
    except StopIteration:
        return None


def due_between(cron: str, timezone: str, first: float, now: float, most: int) -> list[float]:
    """The cron times from ``first`` up to ``now`` (both included), the last ``most`` of
    them, oldest first (read backwards from ``now``: a long downtime costs ``most``
    steps, not one per missed minute)."""
    # A second past now: cronsim's backward step is strict, and cron times are whole
    # minutes, so this includes a time of exactly now.
    start = datetime.fromtimestamp(now, zone(timezone)) + timedelta(seconds=1)
    found: list[float] = []
    for when in CronSim(cron, start, reverse=True):
        at = when.timestamp()
        if at < first or len(found) == most:
            break
        found.append(at)
    return found[::-1]


def rfc3339(at: float) -> str:
    """``at`` in UTC, whole seconds: ``2026-12-08T02:00:00Z`` (a fire's job id)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
