"""Token buckets: per API key (``rate_limit_per_second``, ``rate_limit_burst``)
and per client address (``address_rate_limit_*``).

Key buckets exist only for keys that were authenticated, so callers cannot
invent new ones. Addresses can be invented (IPv6 has plenty), so that limiter
holds at most ``max_buckets`` and forgets the least recently used past it;
idle buckets are dropped by a periodic job anyway::

    limiter = RateLimiter(rate=10, burst=20)
    wait = limiter.take("key-1", now)   # 0.0: allowed; else seconds to wait

Every per-address limit (these buckets, waiting polls, connections) counts an
address as :func:`address_key` spells it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


def address_key(host: str) -> str:
    """A client's address as the per-address limits count it: IPv4 as is (an
    IPv4-mapped IPv6 address too), IPv6 by /64 (one host commonly holds a whole /64)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, rate: float, burst: int, max_buckets: int | None = None) -> None:
        self.rate = rate
        self.burst = burst
        self.max_buckets = max_buckets
        self._buckets: dict[str, _Bucket] = {}  # least recently used first

    @property
    def size(self) -> int:
        """Buckets held now (for /metrics)."""
        return len(self._buckets)

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: str, now: float) -> float:
        """Take one token for ``key``; returns 0 if allowed, else the seconds until one."""
        if not self.enabled:
            return 0.0
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            if self.max_buckets is not None and len(self._buckets) >= self.max_buckets:
                # A forgotten bucket starts full again: at worst one burst more.
                del self._buckets[next(iter(self._buckets))]
            bucket = _Bucket(float(self.burst), now)
        self._buckets[key] = bucket  # now the most recently used
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
