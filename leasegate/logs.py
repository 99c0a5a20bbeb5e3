"""Log lines that callers cannot forge.

Whatever a caller sends (a worker's error message, a reclaim reason, an id)
goes through :func:`escape` before it reaches a log line: line breaks and
other control characters are shown as escapes (``\\n``, ``\\x1b``,
``\\u2028``), so one call is always one log line and no terminal escape
reaches an operator's screen::

    log.warning("task failed: message=%s", escape(message))
    escape("boom\\nINFO forged")   # 'boom\\\\nINFO forged'
"""

from __future__ import annotations

import logging
import math

MAX_CHARS = 2000  # a log line, not a dump: the full text is in the database


def escape(value: object) -> str:
    """``value`` as one printable line: control characters and backslashes escaped,
    cut at :data:`MAX_CHARS` (with how much was cut)."""
    text = str(value)
    if len(text) > MAX_CHARS:
        text = f"{text[:MAX_CHARS]}…(+{len(text) - MAX_CHARS} chars)"
    if text.isprintable() and "\\" not in text:
        return text  # the common case, no copy
    # The backslash too, so that a literal "\n" in the text is told from an escaped newline.
    return "".join(ch if ch.isprintable() and ch != "\\"
                   else ch.encode("unicode_escape").decode("ascii") for ch in text)


class Throttled:
    """One line (a warning or an error), logged at most once per ``window`` seconds;
    the calls in between are counted and the next line says how many it stands
    for. The caller passes the time (``clock.now()`` on the trio thread), so tests drive it::

        disk = Throttled(log, window=600.0)
        disk.warning(clock.now(), "artifact storage failing: %s", exc)
    """

    def __init__(self, logger: logging.Logger, window: float) -> None:
        self.logger = logger
        self.window = window
        self._logged_at = -math.inf
        self._unlogged = 0

    def warning(self, now: float, message: str, *args: object) -> bool:
        """Log ``message % args`` unless one was logged within the window; True if logged."""
        return self._log(logging.WARNING, now, message, args)

    def error(self, now: float, message: str, *args: object) -> bool:
        """:meth:`warning` at ERROR level (something was lost or given up)."""
        return self._log(logging.ERROR, now, message, args)

    def _log(self, level: int, now: float, message: str, args: tuple[object, ...]) -> bool:
        self._unlogged += 1
        if now - self._logged_at < self.window:
            return False
        self.logger.log(level, "%s (%d times since the last report)",
                        message % args, self._unlogged)
        self._logged_at = now
        self._unlogged = 0
        return True

    def recovered(self, message: str) -> None:
        """Say once that the trouble is over (if any was reported); the next
        failure is logged at once."""
        if self._logged_at != -math.inf:
            self.logger.warning("%s", message)
        self._logged_at = -math.inf
        self._unlogged = 0
