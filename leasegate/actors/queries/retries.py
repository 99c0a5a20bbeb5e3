"""When a failed query is tried again: exponential backoff with jitter.

Attempt ``n`` (counted from 1) that fails waits ``min(base × 2^(n−1), max)`` seconds
(``query_retry_base_seconds``, ``query_retry_max_seconds``), spread by ±20% so that the
queries of a site that failed together do not all come back in the same instant.
``JITTER`` is the random source (a test replaces it with a fixed one)::

    backoff(settings, attempt=3)   # 8 s ± 20% by default
"""

from __future__ import annotations

import random
from typing import Final

from leasegate.settings import Settings

SPREAD: Final = 0.2
"""The jitter: a wait is its nominal length times a uniform factor in [0.8, 1.2]."""

JITTER = random.Random()
"""The random source of the jitter (``uniform``)."""


def backoff(settings: Settings, attempt: int) -> float:
    """Seconds a query whose attempt ``attempt`` failed waits before its next one."""
    nominal = min(settings.query_retry_base_seconds * 2.0 ** min(attempt - 1, 64),
                  settings.query_retry_max_seconds)
    return nominal * JITTER.uniform(1 - SPREAD, 1 + SPREAD)
