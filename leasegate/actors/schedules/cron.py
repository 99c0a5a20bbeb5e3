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

import functools
import re
from datetime import datetime
from typing import Final
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

from leasegate.errors import InvalidRequest


@functools.cache
def timezone_names() -> frozenset[str]:
    """The IANA time zones this machine knows (its tz database, read once)."""
    return frozenset(available_timezones())


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; 400 when there is none of that name."""
    if name not in timezone_names():
        raise InvalidRequest(f"timezone {name!r:.80} is not an IANA time zone name, "
                             "e.g. UTC or Europe/Berlin")
    return ZoneInfo(name)


def _cron_pattern() -> str:
    """Five fields of numbers (and month and weekday names), ``*``, ranges, lists and
    steps, each value within its field's bounds."""
    def field(value: str) -> str:
        item = rf"(\*|(?:{value})(?:-(?:{value}))?)(/[1-9][0-9]?)?"
        return rf"{item}(,{item})*"

    values = [r"[0-5]?[0-9]", r"[01]?[0-9]|2[0-3]", r"0?[1-9]|[12][0-9]|3[01]",
              r"0?[1-9]|1[0-2]|" + "|".join(MONTHS), r"[0-7]|" + "|".join(WEEKDAYS)]
    return "^" + " ".join(field(v) for v in values) + "$"


MONTHS: Final = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT",
                 "NOV", "DEC")
WEEKDAYS: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
CRON_PATTERN: Final = _cron_pattern()
CRON: Final = re.compile(CRON_PATTERN)
MAX_CRON: Final = 200
CRON_RULE: Final = ("must be five cron fields (minute hour day-of-month month day-of-week) "
                    "of numbers, names, *, ranges, lists and steps, e.g. \"0 2 * * 1-5\"")
# Each field's first and last value, and how its names count.
_BOUNDS: Final = ((0, 59, ()), (0, 23, ()), (1, 31, ()), (1, 12, MONTHS), (0, 6, WEEKDAYS))


def is_cron(cron: object) -> bool:
    """Whether ``cron`` is five cron fields (:data:`CRON_PATTERN`, at most
    :data:`MAX_CRON` characters)."""
    return isinstance(cron, str) and len(cron) <= MAX_CRON and CRON.fullmatch(cron) is not None


def check_cron(cron: object) -> None:
    """400 unless :func:`is_cron`."""
    if not is_cron(cron):
        raise InvalidRequest(f"cron {CRON_RULE}")


@functools.lru_cache(maxsize=1024)
def _wrapped(cron: str) -> str:
    """``cron`` with each range whose start passes its end wrapped around its field
    (``22-2`` is ``22-23,0-2``; ``FRI-MON`` is ``5-6,0-1``), the way a clock reads it."""
    fields = cron.split()
    for n, (first, last, names) in enumerate(_BOUNDS):
        items = []
        for item in fields[n].split(","):
            span, _, step = item.partition("/")
            start, dash, end = span.partition("-")
            if dash and names == WEEKDAYS and start == "7":  # Sunday, the first day
                start, item = "0", "0" + item[1:]
            if dash and _number(start, names) > _number(end, names):
                suffix = f"/{step}" if step else ""
                items += [f"{start}-{last}{suffix}", f"{first}-{end}{suffix}"]
            else:
                items.append(item)
        fields[n] = ",".join(items)
    return " ".join(fields)


def _number(value: str, names: tuple[str, ...]) -> int:
    if value in names:
        return names.index(value) + (1 if names == MONTHS else 0)
    return int(value)  # a weekday range's end may be 7 (Sunday, the last day)


def _times(cron: str, timezone: str, start: float, *, reverse: bool = False,
           ) -> CronSim | None:
    """cronsim's times from ``start``; None for a cron no date fits (31 February)."""
    try:
        return CronSim(_wrapped(cron), datetime.fromtimestamp(start, zone(timezone)),
                       reverse=reverse)
    except CronSimError:
        return None


def next_after(cron: str, timezone: str, after: float) -> float | None:
    """The first cron time strictly after ``after``; None if there is none (a date
    such as 31 April never comes)."""
    times = _times(cron, timezone, after)
    try:
        return None if times is None else next(times).timestamp()
    except StopIteration:
        return None


def due_between(cron: str, timezone: str, first: float, now: float, most: int) -> list[float]:
    """The cron times from ``first`` up to ``now`` (both included), the last ``most`` of
    them, oldest first (read backwards from ``now``: a long downtime costs ``most``
    steps, not one per missed minute)."""
    # A second past now: cronsim's backward step is strict, and cron times are whole
    # minutes, so this includes a time of exactly now.
    found: list[float] = []
    for when in _times(cron, timezone, now + 1, reverse=True) or ():
        at = when.timestamp()
        if at < first or len(found) == most:
            break
        found.append(at)
    return found[::-1]
