"""leasegate lease latency in every backlog shape.

``.venv/bin/python bench/lease_backlog.py [--rows N] [--leases N] [--max N]``
builds each backlog straight into a fresh database (bulk SQL, no HTTP), starts
the real ``leasegate serve`` on it, and times ``POST /v1/{tasks,queries}/lease``
(``wait_seconds`` 0, keep-alive connection, rate limit off) without and with a
``sites`` filter, then prints p50/p99 per shape. Target: <= 5 ms in every
shape. Beside the HTTP figures it prints the lease query alone (p50 of the
storage module's ``next_queued`` on the same database, in this process, inside
a transaction like the actor's turn): on a busy machine the round trip is
mostly fsync and scheduling, the query is what the backlog changes. The shapes:

- ``empty``: nothing queued (the floor: one HTTP round trip and an actor turn);
- ``tasks, distinct lanes``: N queued tasks, each on its own lane;
- ``tasks, behind a stale lane``: N queued tasks on one lane blocked by a
  stale task, all older than the few ready tasks on other lanes (so a lease
  that walks the queue in order meets the whole blocked backlog first);
- ``queries, finished retained``: N finished queries within retention, then a
  few queued ones.

Every lease takes a different ready row (enough are queued for all of them),
so nothing is re-queued between samples. The default N is 1,000,000 (a few
minutes, mostly building the backlogs); ``--rows 100000`` is quicker.
``--synchronous`` sets the server's ``sqlite_synchronous`` (default FULL, durable).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from _load import percentile, start_leasegate, stop

from leasegate.storage import queries_sql, tasks_sql
from leasegate.storage.connection import connect
from leasegate.storage.migrations import migrate

WARMUP = 20
SITES = 100  # sites the backlogs spread over; the filtered lease names two of them

# Columns every bulk row shares; ``i`` is the row's number (1..n) from the CTE.
TASK_INSERT = (
    "INSERT INTO tasks (task_id, tenant, site, account, kind, params, priority, "
    "fingerprint, status, created_at, expires_at, updated_at{extra_cols}) "
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :n) "
    "SELECT :prefix || i, 'default', {site}, {account}, 'bench', '{{}}', 0, 'f', "
    "'{status}', :t0 + i * 1e-6, :t0 + 86400, :t0{extra_vals} FROM n"
)
QUERY_INSERT = (
    "INSERT INTO queries (query_id, tenant, site, kind, params, fingerprint, status, "
    "created_at, expires_at, updated_at, completed_at, result) "
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :n) "
    "SELECT :prefix || i, 'default', 's' || (i % :sites), 'bench', '{}', 'f', :status, "
    ":t0 + i * 1e-6, :t0 + 86400, :t0, :completed, :result FROM n"
)


def tasks(conn: sqlite3.Connection, n: int, prefix: str, site: str, account: str,
          t0: float) -> None:
    conn.execute(TASK_INSERT.format(site=site, account=account, status="queued",
                                    extra_cols="", extra_vals=""),
                 {"n": n, "prefix": prefix, "t0": t0})


def stale_task(conn: sqlite3.Connection, t0: float) -> None:
    conn.execute(TASK_INSERT.format(
        site="'s0'", account="'a0'", status="stale",
        extra_cols=", lease_owner, lease_token, attempts, started_at, stale_reason, stale_at",
        extra_vals=", 'gone', 'token', 1, :t0, 'lease_expired: bench', :t0"),
        {"n": 1, "prefix": "stale-", "t0": t0 - 60})


def queries(conn: sqlite3.Connection, n: int, prefix: str, status: str, sites: int,
            t0: float) -> None:
    finished = status != "queued"
    conn.execute(QUERY_INSERT, {"n": n, "prefix": prefix, "status": status, "sites": sites,
                                "t0": t0,
                                "completed": t0 if finished else None,
                                "result": "{}" if finished else None})


def build(path: Path, shape: Callable[[sqlite3.Connection, float], None]) -> float:
    """A fresh, migrated database holding ``shape``'s rows; seconds it took."""
    began = time.perf_counter()
    conn = connect(path, synchronous="OFF")
    try:
        migrate(conn)
        conn.execute("BEGIN IMMEDIATE")
        shape(conn, time.time() - 3600)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - began


def shapes(rows: int, ready: int) -> list[tuple[str, str, Callable[[sqlite3.Connection, float],
                                                                   None]]]:
    """(name, channel, builder) for every shape."""
    def distinct_lanes(conn: sqlite3.Connection, t0: float) -> None:
        tasks(conn, rows, "t-", f"'s' || (i % {SITES})", "'a' || i", t0)

    def behind_stale_lane(conn: sqlite3.Connection, t0: float) -> None:
        stale_task(conn, t0)
        tasks(conn, rows, "blocked-", "'s0'", "'a0'", t0)
        # Ready lanes, younger than the whole blocked backlog, on the filtered sites.
        tasks(conn, ready, "ready-", "'s' || (i % 2)", "'r' || i", t0 + 1)

    def finished_retained(conn: sqlite3.Connection, t0: float) -> None:
        queries(conn, rows, "done-", "succeeded", SITES, t0)
        queries(conn, ready, "q-", "queued", 2, t0 + 1)

    def nothing(conn: sqlite3.Connection, t0: float) -> None:
        pass

    return [
        ("empty", "tasks", nothing),
        ("empty", "queries", nothing),
        (f"{rows:,} queued, distinct lanes", "tasks", distinct_lanes),
        (f"{rows:,} queued behind a stale lane", "tasks", behind_stale_lane),
        (f"{rows:,} finished retained", "queries", finished_retained),
    ]


# ---- the served gateway ------------------------------------------------------------------


def time_query(path: Path, channel: str, max_: int, sites: list[str] | None,
               calls: int = 50) -> float:
    """p50 milliseconds of the lease query alone (rolled back: nothing is taken)."""
    module = tasks_sql if channel == "tasks" else queries_sql
    conn = connect(path)
    samples = []
    try:
        for _ in range(calls):
            conn.execute("BEGIN IMMEDIATE")
            began = time.perf_counter()
            module.next_queued(conn, sites, time.time(), max_)
            samples.append((time.perf_counter() - began) * 1e3)
            conn.execute("ROLLBACK")
    finally:
        conn.close()
    return percentile(samples, 50)


def time_leases(url: str, key: str, channel: str, leases: int, max_: int,
                sites: list[str] | None) -> tuple[list[float], int]:
    """Milliseconds per lease call, and how many jobs they leased in all."""
    body: dict[str, object] = {"worker_id": "bench-worker", "wait_seconds": 0, "max": max_}
    if sites is not None:
        body["sites"] = sites
    samples: list[float] = []
    got = 0
    with httpx.Client(base_url=url, timeout=30,
                      headers={"Authorization": f"Bearer {key}"}) as http:
        for n in range(WARMUP + leases):
            began = time.perf_counter()
            reply = http.post(f"/v1/{channel}/lease", json=body)
            elapsed = (time.perf_counter() - began) * 1e3
            reply.raise_for_status()
            if n >= WARMUP:
                samples.append(elapsed)
                got += len(reply.json()["items"])
    return samples, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="backlog rows per shape")
    parser.add_argument("--leases", type=int, default=200, help="timed leases per column")
    parser.add_argument("--max", type=int, default=1, help="the lease calls' max")
    parser.add_argument("--synchronous", default="FULL", help="the server's sqlite_synchronous")
    args = parser.parse_args()
    ready = 2 * (WARMUP + args.leases) * args.max + 50
    filters: list[list[str] | None] = [None, ["s0", "s1"]]
    print(f"lease latency, ms: the query alone (p50) and HTTP (p50 / p99 over {args.leases} "
          f"calls), max {args.max}, synchronous {args.synchronous}; target <= 5 ms")
    print(f"{'channel':<8} {'backlog':<34} {'build s':>7} {'query':>6} {'s0,s1':>6} "
          f"{'HTTP all sites':>15} {'HTTP s0,s1':>15} {'leased':>6}")
    for name, channel, shape in shapes(args.rows, ready):
        with tempfile.TemporaryDirectory(prefix="lease-backlog-") as tmp:
            data = Path(tmp)
            built = build(data / "leasegate.db", shape)
            query = [time_query(data / "leasegate.db", channel, args.max, f) for f in filters]
            served = start_leasegate(data, {"LEASEGATE_RATE_LIMIT_PER_SECOND": "0",
                                            "LEASEGATE_SQLITE_SYNCHRONOUS": args.synchronous,
                                            # NORMAL or OFF are refused without it
                                            "LEASEGATE_UNSAFE_DURABILITY": "true"},
                                     timeout=120)
            url, key = served.url, served.keys["worker"]
            try:
                cells = []
                leased = 0
                for sites in filters:
                    samples, got = time_leases(url, key, channel, args.leases, args.max, sites)
                    leased += got
                    cells.append(f"{percentile(samples, 50):6.2f} /{percentile(samples, 99):6.2f}")
            finally:
                stop(served)
            print(f"{channel:<8} {name:<34} {built:7.1f} {query[0]:6.2f} {query[1]:6.2f} "
                  f"{cells[0]:>15} {cells[1]:>15} {leased:>6}", flush=True)


if __name__ == "__main__":
    main()
