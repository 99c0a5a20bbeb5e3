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


def iso(wall: float | None) -> str | None:
    """``2026-11-30T08:00:00Z``: ISO 8601, UTC, whole seconds; ``None`` (a
    timestamp not set yet) passes through."""
    if wall is None:
        return None
    return datetime.fromtimestamp(int(wall), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
