"""What a throttled site's bucket costs a lease call, now that it is a row.

``.venv/bin/python bench/site_throttle.py [--leases N] [--postgres URL]``
times one channel's lease selection in a transaction like the actor's turn, on a
database with queued queries of one site: without any site control (the gate is
idle: nothing asked) and with the site throttled at a rate that admits every lease
(the bucket read, drawn from and written back, under the lock that orders the
draws on PostgreSQL). Each sample is rolled back, so every one sees the same
queue and the same bucket; the two kinds alternate, so a noisy machine weighs on
both alike. Prints p50/p99 of each and the throttled one's p50 as a multiple of
the plain one's (the baseline of the same run).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _load import percentile

from leasegate.actors.queue.sites import SiteGate
from leasegate.storage import operator_sql, queries_sql
from leasegate.storage.connection import begin, commit, connect, rollback
from leasegate.storage.engine import Connection
from leasegate.storage.migrations import migrate

QUEUED = 1000
T0 = 1_800_000_000.0


def fill(conn: Connection) -> None:
    begin(conn)
    for i in range(QUEUED):
        queries_sql.JOBS.insert_many(conn, [dict(
            query_id=f"q{i}", tenant="t", site="shop", kind="k", params="{}", fingerprint="f",
            status="queued", created_at=T0, updated_at=T0, expires_at=T0 + 86400)])
    operator_sql.set_site(conn, "shop", paused=False, reason=None, by="bench",
                          leases_per_second=1e6, now=T0)
    commit(conn)


def sample(conn: Connection, gate: SiteGate | None, now: float) -> float:
    started = time.perf_counter()
    begin(conn)
    if gate is None:
        rows = queries_sql.next_queued(conn, None, now, 1)
    else:
        admit = gate.admission(conn, now)
        rows = queries_sql.next_queued(conn, None, now, 1, admit=admit)
        admit.spend()
    rollback(conn)
    assert len(rows) == 1
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leases", type=int, default=5000)
    parser.add_argument("--postgres", default=None, help="a migrated, empty database's URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        conn: Connection
        if args.postgres is None:
            sqlite = connect(Path(tmp) / "bench.db", synchronous="OFF")
            migrate(sqlite)
            conn = sqlite
        else:
            from leasegate.storage.postgres.connection import connect as pg_connect
            conn = pg_connect(args.postgres)
        fill(conn)
        gate = SiteGate("query")
        gate.rates["shop"] = 1e6  # as the task actor's controls would have told it
        plain: list[float] = []
        throttled: list[float] = []
        for i in range(args.leases):
            now = T0 + 1 + i * 1e-3
            plain.append(sample(conn, None, now))
            throttled.append(sample(conn, gate, now))
    for name, times in (("no control", plain), ("throttled", throttled)):
        print(f"{name:12} p50 {percentile(times, 50) * 1e6:8.1f} us   "
              f"p99 {percentile(times, 99) * 1e6:8.1f} us")
    ratio = percentile(throttled, 50) / percentile(plain, 50)
    print(f"throttled / no control (p50): {ratio:.2f}x")


if __name__ == "__main__":
    main()
