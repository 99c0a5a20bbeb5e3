"""Submits, completions and dispatch latency per minute over the last hour, for
the console's charts.

Fed by the job events the queue actors publish after each commit (single and
batch routes alike), so the figures are what happened to jobs, not what the
HTTP routes answered. 60 one-minute slots in memory, since the process
started; nothing a caller can grow::

    activity = Activity()
    hub.listeners.append(activity.on_event)
    activity.charts(now)   # three Chart values for the overview page
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from leasegate.actors.queue.history import JobEvent
from leasegate.http.job_metrics import ended, first_dispatch_wait

SLOTS = 60
WIDTH, HEIGHT = 300, 90
# The plot area's margins (left, top, right, bottom): room for the axes' labels.
MARGINS = (44, 8, 8, 18)


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


@dataclass
class _Minute:
    submits: int = 0
    completions: int = 0
    dispatches: int = 0  # first leases, whose waits are summed below
    waited: float = 0.0


class Activity:
    def __init__(self) -> None:
        self._minutes: dict[int, _Minute] = {}  # at most SLOTS minutes kept

    def _slot(self, at: float) -> _Minute:
        minute = int(at // 60)
        slot = self._minutes.get(minute)
        if slot is None:
            slot = self._minutes[minute] = _Minute()
            for old in [m for m in self._minutes if m <= minute - SLOTS]:
                del self._minutes[old]
        return slot

    def on_event(self, event: JobEvent) -> None:
        """Count one job event (a hub listener; runs on the trio thread)."""
        if event.kind == "submitted":
            self._slot(event.at).submits += 1
        elif ended(event) is not None:
            self._slot(event.at).completions += 1
        elif (waited := first_dispatch_wait(event)) is not None:
            slot = self._slot(event.at)
            slot.dispatches += 1
            slot.waited += waited

    def _series(self, now: float) -> list[_Minute]:
        last = int(now // 60)
        return [self._minutes.get(m, _Minute()) for m in range(last - SLOTS + 1, last + 1)]

    def series(self, name: str, now: float) -> list[float]:
        """Per minute, oldest first: ``submits``, ``completions``, or ``dispatch_ms``
        (the mean time from submit to first lease)."""
        if name == "dispatch_ms":
            return [m.waited * 1000 / m.dispatches if m.dispatches else 0.0
                    for m in self._series(now)]
        return [float(getattr(m, name)) for m in self._series(now)]

    def charts(self, now: float) -> list[Chart]:
        charts = []
        for name in ("submits", "completions"):
            values = self.series(name, now)
            charts.append(chart(name, f"{name} per minute: {int(sum(values))} in all, "
                                      f"peak {int(max(values))}", values, "/min"))
        latency = self.series("dispatch_ms", now)
        charts.append(chart("dispatch latency", "dispatch latency (submit to first lease, "
                            f"mean per minute): peak {max(latency):.0f} ms", latency, "ms"))
        return charts


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
