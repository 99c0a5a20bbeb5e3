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

from dataclasses import dataclass

from leasegate.actors.history import JobEvent
from leasegate.http.job_metrics import ended, first_dispatch_wait

SLOTS = 60


@dataclass(frozen=True)
class Chart:
    """One series as an SVG polyline: ``points`` for a ``width`` x ``height`` box."""

    name: str
    caption: str
    points: str
    width: int = 240
    height: int = 40


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
                                      f"peak {int(max(values))}", values))
        latency = self.series("dispatch_ms", now)
        charts.append(chart("dispatch latency", "dispatch latency (submit to first lease, "
                            f"mean per minute): peak {max(latency):.0f} ms", latency))
        return charts


def chart(name: str, caption: str, values: list[float], width: int = 240,
          height: int = 40) -> Chart:
    peak = max(values, default=0)
    step = width / max(1, len(values) - 1)
    scale = (height - 2) / peak if peak else 0.0
    points = " ".join(f"{i * step:.1f},{height - 1 - v * scale:.1f}"
                      for i, v in enumerate(values))
    return Chart(name, caption, points, width, height)
