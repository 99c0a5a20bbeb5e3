"""Submits and completions per minute over the last hour, for the console's charts.

Counted from the answers of the HTTP routes (there is no time series elsewhere):
60 one-minute slots in memory, since the process started; nothing a caller can
grow. Batch routes count one per created item when they report ``items``.
"""

from __future__ import annotations

from dataclasses import dataclass

SLOTS = 60
SERIES = ("submits", "completions")

# (method, route rule, status) -> the series it counts in.
SINGLE = {
    ("POST", "/v1/tasks", 201): "submits",
    ("POST", "/v1/queries", 201): "submits",
    ("POST", "/v1/tasks/<task_id>/result", 200): "completions",
    ("POST", "/v1/queries/<query_id>/result", 200): "completions",
}


@dataclass(frozen=True)
class Chart:
    """One series as an SVG polyline: ``points`` for a ``width`` x ``height`` box."""

    name: str
    total: int
    peak: int
    points: str
    width: int = 240
    height: int = 40


class Activity:
    def __init__(self) -> None:
        # minute -> counts per series; at most SLOTS minutes kept.
        self._minutes: dict[int, dict[str, int]] = {}

    def count(self, series: str, now: float, n: int = 1) -> None:
        minute = int(now // 60)
        slot = self._minutes.get(minute)
        if slot is None:
            slot = self._minutes[minute] = dict.fromkeys(SERIES, 0)
            for old in [m for m in self._minutes if m <= minute - SLOTS]:
                del self._minutes[old]
        slot[series] = slot.get(series, 0) + n

    def observe(self, method: str, rule: str, status: int, now: float) -> None:
        series = SINGLE.get((method, rule, status))
        if series is not None:
            self.count(series, now)

    def series(self, name: str, now: float) -> list[int]:
        last = int(now // 60)
        return [self._minutes.get(m, {}).get(name, 0) for m in range(last - SLOTS + 1, last + 1)]

    def charts(self, now: float) -> list[Chart]:
        return [chart(name, self.series(name, now)) for name in SERIES]


def chart(name: str, values: list[int], width: int = 240, height: int = 40) -> Chart:
    peak = max(values, default=0)
    step = width / max(1, len(values) - 1)
    scale = (height - 2) / peak if peak else 0.0
    points = " ".join(f"{i * step:.1f},{height - 1 - v * scale:.1f}"
                      for i, v in enumerate(values))
    return Chart(name, sum(values), peak, points, width, height)
