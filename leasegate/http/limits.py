"""Per-key token buckets (``rate_limit_per_second``, ``rate_limit_burst``).

Buckets exist only for keys that were authenticated, so callers cannot
invent new ones; idle buckets are dropped by a periodic job anyway::

    limiter = RateLimiter(rate=10, burst=20)
    wait = limiter.take("key-1", now)   # 0.0: allowed; else seconds to wait
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: str, now: float) -> float:
        """Take one token for ``key``; returns 0 if allowed, else the seconds until one."""
        if not self.enabled:
            return 0.0
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def sweep(self, now: float) -> int:
        """Drop buckets that have refilled completely: they hold no information."""
        full_after = self.burst / self.rate if self.enabled else 0.0
        idle = [k for k, b in self._buckets.items() if now - b.updated >= full_after]
        for key in idle:
            del self._buckets[key]
        return len(idle)
