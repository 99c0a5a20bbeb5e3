"""Submits, completions and dispatch latency per minute over the last hour, for
the console's charts.

Read from the job history in the database (``queue.activity``: one aggregate
over an index range a channel), so the charts survive a restart and count every
gateway's work; both channels summed::

    tasks, queries = await read_activity(system, now)
    charts(now, tasks, queries)   # three Chart values for the overview page
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from leasegate.actors.queue.activity import Activity, Minute, ReadActivity
from leasegate.system import System

DAY = 86_400.0
HOUR = 3_600.0
SLOTS = 60
WIDTH, HEIGHT = 300, 90
# The plot area's margins (left, top, right, bottom): room for the axes' labels, the
# widest of which ("500 /min", "20k ms") is about 46 px at 10 px.
MARGINS = (56, 10, 8, 18)


@dataclass(frozen=True)
class Chart:
    """One series as an SVG polyline in a ``width`` x ``height`` box: ``points`` inside
    the plot area (the box less ``MARGINS``), whose y axis runs from 0 to ``top``
    (a round number at or above the peak), labelled with ``unit``; the x axis is
    the last hour, a minute a point."""

    name: str
    caption: str
    points: str
    top: float
    unit: str
    width: int = WIDTH
    height: int = HEIGHT

    margins: tuple[int, int, int, int] = MARGINS

    @property
    def top_label(self) -> str:
        """The axis' top with its unit, short enough for the margin: "5 /min", "20k ms"."""
        for factor, suffix in ((1e6, "M"), (1e3, "k")):
            if self.top >= factor:
                return f"{self.top / factor:g}{suffix} {self.unit}"
        return f"{self.top:g} {self.unit}"


async def read_activity(system: System, now: float) -> tuple[Activity, Activity]:
    """The tasks' and the queries' activity: the last hour by minute, failures by site
    over the last day."""
    since = (math.floor(now / 60) - SLOTS + 1) * 60.0
    ask = ReadActivity(since, now, now - DAY, now - HOUR)
    return await system.tasks.ask(ask), await system.queries.ask(ask)


def charts(now: float, *channels: Activity) -> list[Chart]:
    """The three charts of the channels' minutes, summed."""
    last = int(now // 60)
    slots = {m: [0, 0, 0, 0.0] for m in range(last - SLOTS + 1, last + 1)}
    for activity in channels:
        for minute in activity.minutes:
            slot = slots.get(minute.minute)
            if slot is not None:
                _add(slot, minute)
    series = list(slots.values())
    found = []
    for name, index in (("submits", 0), ("completions", 1)):
        values = [float(s[index]) for s in series]
        found.append(chart(name, f"{name} per minute: {int(sum(values))} in all, "
                                 f"peak {int(max(values))}", values, "/min"))
    latency = [s[3] * 1000 / s[2] if s[2] else 0.0 for s in series]
    found.append(chart("dispatch latency", "dispatch latency (submit to first lease, "
                       f"mean per minute): peak {max(latency):.0f} ms", latency, "ms"))
    return found


def _add(slot: list[float], minute: Minute) -> None:
    slot[0] += minute.submits
    slot[1] += minute.completions
    slot[2] += minute.dispatches
    slot[3] += minute.waited


def chart(name: str, caption: str, values: list[float], unit: str) -> Chart:
    left, top_margin, right, bottom = MARGINS
    plot_width, plot_height = WIDTH - left - right, HEIGHT - top_margin - bottom
    top = round_up(max(values, default=0))
    step = plot_width / max(1, len(values) - 1)
    scale = plot_height / top
    points = " ".join(f"{left + i * step:.1f},{top_margin + plot_height - v * scale:.1f}"
                      for i, v in enumerate(values))
    return Chart(name, caption, points, top, unit)


def round_up(peak: float) -> float:
    """The axis' top: 1, 2 or 5 times a power of ten, at or above ``peak`` (1 for 0)."""
    if peak <= 1:
        return 1.0
    power = 10.0 ** math.floor(math.log10(peak))
    return next(n * power for n in (1, 2, 5, 10) if n * power >= peak)
