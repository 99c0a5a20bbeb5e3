"""Flood the device table: random device ids from many keys, against a served gateway.

    python bench/devices_flood.py                   # 1,000,000 heartbeats, 1,000 keys
    python bench/devices_flood.py --count 50000     # a quicker run

Starts ``leasegate serve`` on a fresh data directory (``--capacity`` sets its
``device_capacity``), creates ``--keys`` client keys (each key is also a rate
limiter bucket, and each its own tenant), and sends ``--count`` heartbeats of
random device ids spread over those keys, ``--concurrency`` at a time. It
prints the devices table's size and the server's RSS before and after: the
table stays at ``device_capacity`` (idle devices are evicted least recently
seen first) and the memory does not grow with the number of ids callers
invent. Exits non-zero if the table grew past the capacity.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import trio
from _readings import rss_kib
from _servers import start_leasegate, stop

MAX_TRIES = 20  # a request refused with 429 (rate limit) is tried again, at most this often


@dataclass
class FloodResult:
    sent: int = 0
    statuses: Counter[str] = field(default_factory=Counter)  # "200", "429/6008", ...
    seconds: float = 0.0


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _post(client: httpx.AsyncClient, path: str, key: str,
                body: dict[str, str] | None = None) -> httpx.Response:
    """POST, waiting out 429s of the rate limiter (its ``Retry-After``, capped)."""
    for _ in range(MAX_TRIES):
        response = await client.post(path, headers=auth(key), json=body)
        if response.status_code != 429 or response.json()["error"]["code"] != 4290:
            return response
        await trio.sleep(min(1.0, float(response.headers.get("Retry-After", "0.1"))))
    return response


async def devices_total(client: httpx.AsyncClient, admin_key: str) -> int:
    response = await client.get("/v1/devices?limit=1", headers=auth(admin_key))
    response.raise_for_status()
    return int(response.json()["total"])


async def create_keys(client: httpx.AsyncClient, admin_key: str, n: int) -> list[str]:
    keys: list[str] = []

    async def one(i: int) -> None:
        body = {"role": "client", "name": f"flood-{i}", "tenant": f"flood-{i}"}
        response = await _post(client, "/v1/admin/keys", admin_key, body)
        response.raise_for_status()
        keys.append(response.json()["key"])

    async with trio.open_nursery() as nursery:
        limit = trio.CapacityLimiter(16)
        for i in range(n):
            async def guarded(i: int = i) -> None:
                async with limit:
                    await one(i)
            nursery.start_soon(guarded)
    return keys


async def flood(url: str, admin_key: str, *, count: int, keys: int,
                concurrency: int = 64, seconds: float | None = None) -> FloodResult:
    """``count`` heartbeats of random device ids, spread over ``keys`` new client keys
    (stopping early after ``seconds`` of heartbeats, if given)."""
    result = FloodResult()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        client_keys = await create_keys(client, admin_key, keys)
        began = time.perf_counter()
        stop_at = None if seconds is None else began + seconds
        next_index = iter(range(count))

        async def sender() -> None:
            for i in next_index:  # shared: each index is taken once
                if stop_at is not None and time.perf_counter() > stop_at:
                    return
                key = client_keys[i % len(client_keys)]
                device_id = secrets.token_hex(16)
                response = await _post(client, f"/v1/devices/{device_id}/heartbeat", key)
                status = response.status_code
                label = (str(status) if status < 400
                         else f"{status}/{response.json()['error']['code']}")
                result.statuses[label] += 1
                result.sent += 1

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(sender)
        result.seconds = time.perf_counter() - began
    return result


async def table_size(url: str, admin_key: str) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await devices_total(client, admin_key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="heartbeats to send")
    parser.add_argument("--keys", type=int, default=1000, help="client keys to spread them on")
    parser.add_argument("--capacity", type=int, default=5000, help="device_capacity")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop sending after this long (a bounded run on a busy machine)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leasegate-flood-") as tmp:
        served = start_leasegate(Path(tmp) / "data",
                                 {"LEASEGATE_DEVICE_CAPACITY": str(args.capacity),
                                  # one address sends for a thousand keys: its limit on
                                  # unverified keys would set the pace, not the devices
                                  "LEASEGATE_ADDRESS_RATE_LIMIT_PER_SECOND": "0",
                                  # the table and memory are measured, not fsync
                                  "LEASEGATE_SQLITE_SYNCHRONOUS": "NORMAL",
                                  "LEASEGATE_UNSAFE_DURABILITY": "true"})
        try:
            admin = served.keys["admin"]
            before_rows = trio.run(table_size, served.url, admin)
            before_rss = rss_kib(served.pid)
            print(f"before: devices table {before_rows} rows, server RSS "
                  f"{before_rss / 1024:.1f} MiB")
            result = trio.run(lambda: flood(served.url, admin, count=args.count,
                                            keys=args.keys, concurrency=args.concurrency,
                                            seconds=args.seconds))
            after_rows = trio.run(table_size, served.url, admin)
            after_rss = rss_kib(served.pid)
        finally:
            stop(served)
    rate = result.sent / result.seconds if result.seconds else 0.0
    answers = dict(sorted(result.statuses.items()))
    print(f"sent {result.sent} of {args.count} heartbeats of random device ids over "
          f"{args.keys} keys in {result.seconds:.1f} s ({rate:.0f}/s); answers: {answers}")
    print(f"after: devices table {after_rows} rows (device_capacity {args.capacity}), "
          f"server RSS {after_rss / 1024:.1f} MiB ({(after_rss - before_rss) / 1024:+.1f} MiB)")
    return 0 if after_rows <= args.capacity else 1


if __name__ == "__main__":
    sys.exit(main())
