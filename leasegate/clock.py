"""The one clock: wall time derived from ``trio.current_time()``.

Every timestamp and deadline in leasegate comes from a :class:`Clock`, so a
test under trio's autojump clock runs hours of leases, TTLs and retention in
milliseconds, and a timer can sleep until exactly the wall time it wants::

    clock = Clock()                      # inside trio.run
    expires = clock.now() + 60.0         # a wall time, stored in the database
    await trio.sleep_until(clock.deadline(expires))
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import trio


class Clock:
    """Wall seconds since the Unix epoch, advancing with trio's clock.

    ``start_epoch`` pins the wall time at creation (tests use a fixed date);
    by default it is the real time. Must be created inside ``trio.run``.
    """

    def __init__(self, start_epoch: float | None = None) -> None:
        wall = time.time() if start_epoch is None else start_epoch
        self._offset = wall - trio.current_time()

    def now(self) -> float:
        """The current wall time, in seconds since the epoch."""
        return self._offset + trio.current_time()

    def deadline(self, wall: float) -> float:
        """The trio deadline (for ``move_on_at``/``sleep_until``) of a wall time."""
        return wall - self._offset

    def iso_now(self) -> str:
        return iso_at(self.now())


def iso_at(wall: float) -> str:
    """``2026-11-30T08:00:00Z``: ISO 8601, UTC, whole seconds (API.md)."""
    return datetime.fromtimestamp(int(wall), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso(wall: float | None) -> str | None:
    """:func:`iso_at`, passing ``None`` (a timestamp not set yet) through."""
    return None if wall is None else iso_at(wall)


def parse_iso(text: str) -> float:
    """Parse an ISO 8601 timestamp; a naive one is taken as UTC."""
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
