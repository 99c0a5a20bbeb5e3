"""leasegate beside its peers: the same lifecycle, whole jobs per second, in one run.

``.venv/bin/python bench/peers.py`` (``make bench`` installs what it needs; a few
minutes at the default 4,000 jobs, 20,000 for the fast runs: beanstalkd and leasegate
batched, ``--fast-jobs``; ``--jobs 200`` for a smoke run) runs one lifecycle shape
against each system: ``--procs`` producer processes submitting one job a request and as
many consumer processes that take a job, run a trivial handler and acknowledge it; every
client a plain Python process, started together once all have connected.

* leasegate: queries and tasks (the SDK: ``submit_query`` / ``submit_task``, and
  ``AsyncWorker`` lease ``max`` 10), then both batched (100 a call: ``submit_many_*``
  and ``AsyncWorker(batch=100)``), as ``bench/lifecycle.py``, each against a fresh
  ``leasegate serve`` (durable defaults, rate limiting off);
* beanstalkd with ``-f 0`` (an fsync after every write), started here with a binlog
  of its own, client greenstalk: ``put``, then ``reserve`` / ``delete``; and
  "pipelined 100", its twin of a batch (it has none): 100 commands a send;
* RQ on a redis-server started here with ``appendonly yes``, ``appendfsync
  always``: ``enqueue``, and an RQ ``SimpleWorker`` per consumer (no fork a job);
* procrastinate on the local PostgreSQL (``--postgres``; a database of its own,
  dropped afterwards): ``defer``, and a worker of concurrency 10 per consumer.

A peer that is not installed is left out with one line saying how to install it.
Beside the lifecycles, the server CPU per request of leasegate's submit, lease and
result and of a bare Quart-Trio route (``bench/baseline_app.py``), and the targets of
the issue that asked for this bench, each with its measured ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _peer_clients as clients
import _report as names
import lifecycle
from _load import Child, Measured, run_clients
from _readings import fsync_ms
from _report import percentile, ratio_table, reach_table, say, systems_table, targets_table
from _route_cost import RouteCost, measure_route_cost
from _servers import (
    DEFAULT_POSTGRES,
    INSTALL,
    Peer,
    beanstalkd,
    create_database,
    drop_database,
    missing,
    postgres_settings,
    procrastinate_database,
    redis_server,
    start_gateway,
    start_leasegate,
    stop,
    version,
)

SYSTEMS = ("leasegate", "beanstalkd", "rq", "procrastinate")
# The fast runs (beanstalkd, leasegate batched) take this many times --jobs: at 4,000
# jobs they lasted one to four seconds, so the clients' start and the servers' warm-up
# weighed on them more than on the runs they are compared with.
FAST_JOBS_FACTOR = 5


def run_leasegate(label: str, mode: lifecycle.Mode, data: Path, jobs: int, procs: int
                  ) -> tuple[Measured, lifecycle.Outcome]:
    """One leasegate mode against a fresh server; also as ``lifecycle.py`` reports it."""
    system, _, mode_name = label.partition(", ")
    measured = Measured(system, mode_name, jobs)
    outcome = lifecycle.Outcome(mode, jobs)
    served = start_leasegate(data, lifecycle.ENV)
    try:
        if mode.batched and not lifecycle.batch_endpoints(served, mode.channel):
            measured.skipped = outcome.skipped = "batched: endpoint not available"
            return measured, outcome
        run_clients(measured, *clients.leasegate(served, mode), procs, served.pid)
        outcome.requests = measured.requests = lifecycle.served_requests(served)
    finally:
        stop(served)
    outcome.done, outcome.seconds = measured.done, measured.seconds
    outcome.server_cpu = measured.server_cpu or 0.0
    outcome.others_cpu = (measured.others_busy_cpu * measured.seconds
                          / max(measured.busy_seconds, 1e-9))
    outcome.submit_s, outcome.calls = measured.submit_s, measured.calls
    outcome.failures = measured.failures
    return measured, outcome


def run_leasegate_postgres(label: str, mode: lifecycle.Mode, data: Path, jobs: int,
                           procs: int, server: str) -> Measured:
    """One leasegate mode with SDK workers against one gateway on a fresh database of
    the PostgreSQL ``server`` (procrastinate's), its backends' CPU measured as
    procrastinate's are."""
    system, _, mode_name = label.partition(", ")
    measured = Measured(system, mode_name, jobs)
    database = create_database(server)
    try:
        served = start_gateway("gw-0", data, database, lifecycle.ENV)
        try:
            run_clients(measured, *clients.leasegate(served, mode), procs, served.pid,
                        database)
        finally:
            stop(served)
    finally:
        drop_database(database)
    return measured


def run_peer(label: str, start: Callable[[], contextlib.AbstractContextManager[Peer]],
             producer: Callable[..., None], consumer: Callable[..., None],
             extra: tuple[object, ...], jobs: int, procs: int) -> Measured:
    """One peer's lifecycle against a server ``start`` brings up (and stops)."""
    system, _, mode = label.partition(", ")
    measured = Measured(system, mode, jobs)
    with start() as peer:
        produce: Child = (producer, (peer.target, *extra))
        consume: Child = (consumer, (peer.target, *extra))
        return run_clients(measured, produce, consume, procs, peer.pid, peer.database)


def main() -> int:
    parser = lifecycle.load_parser(__doc__, 4_000, "run")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--postgres", default=os.environ.get("LEASEGATE_BENCH_POSTGRES",
                                                             DEFAULT_POSTGRES),
                        help="a PostgreSQL database to create procrastinate's next to "
                             "(env LEASEGATE_BENCH_POSTGRES)")
    parser.add_argument("--fast-jobs", type=int, default=None,
                        help="jobs per run of the modes that take a job in well under a "
                             "millisecond (beanstalkd, one put a request and pipelined; "
                             "leasegate batched), every system alike (default 5 x --jobs: "
                             "at 4,000 such a run lasts a second or two, mostly its ramp)")
    args = parser.parse_args()
    if args.fast_jobs is None:
        args.fast_jobs = FAST_JOBS_FACTOR * args.jobs
    # SIGTERM as Ctrl-C: unwind, so that every server started here is stopped (and the
    # database dropped) on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if (min(args.jobs, args.fast_jobs, args.procs) < 1
            or not set(systems) <= set(SYSTEMS)):
        parser.error("--jobs, --fast-jobs and --procs at least 1; --systems of "
                     f"{', '.join(SYSTEMS)}")
    began = time.perf_counter()
    say(f"leasegate beside its peers: {args.jobs:,} jobs a run ({args.fast_jobs:,} for "
        f"beanstalkd and leasegate batched), {args.procs} producer and "
        f"{args.procs} consumer processes (Python clients); machine load "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min), "
        f"{os.cpu_count()} cores")
    available = _available(systems, args.postgres)
    with tempfile.TemporaryDirectory(prefix="leasegate-peers-") as tmp:
        floor = fsync_ms(Path(tmp))
        say(f"  every server's files in {tmp} (PostgreSQL's where its server keeps them); "
            f"4 KiB append + fsync there: p50 {percentile(floor, 50):.2f} ms, "
            f"p99 {percentile(floor, 99):.2f} ms")
        runs, outcomes, cost = _run_all(available, Path(tmp), args)
    rates = {m.label: m.per_second for m in runs if not m.skipped}
    if outcomes and cost is not None:
        lifecycle.report(outcomes, {"leasegate": cost.submit, "baseline": cost.bare})
    systems_table(runs)
    ratio_table(rates)
    targets_table(rates, cost)
    reach_table(runs, rates, cost, os.cpu_count() or 1)
    postgres_table(runs)
    say(f"\nmachine load at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"total run time {time.perf_counter() - began:.0f} s")
    return 0


LG_PG_QUERIES = "leasegate on PostgreSQL, queries"
LG_PG_TASKS = "leasegate on PostgreSQL, tasks"
LG_PG_GOAL = 1.5  # leasegate on PostgreSQL's jobs/s, at least this many times procrastinate's


def postgres_table(runs: list[Measured]) -> None:
    """leasegate (one gateway, SDK workers) and procrastinate on the same PostgreSQL
    server: jobs/s and the CPU of each one's database backends per job, each as a
    ratio to procrastinate's measured in this run."""
    by_label = {m.label: m for m in runs if not m.skipped}
    peer = by_label.get(names.PROCRASTINATE)
    mine = [by_label[label] for label in (LG_PG_QUERIES, LG_PG_TASKS) if label in by_label]
    if peer is None or not mine or not peer.per_second:
        return
    peer_cpu = (peer.db_cpu or 0.0) / max(peer.done, 1)
    say()
    say("On the same PostgreSQL server (its backends' CPU per job; other databases' "
        "left out):")
    say(f"  {names.PROCRASTINATE:<36} {peer.per_second:8,.0f} jobs/s  PostgreSQL CPU "
        f"{peer_cpu * 1e3:6.2f} ms/job")
    for m in mine:
        cpu = (m.db_cpu or 0.0) / max(m.done, 1)
        say(f"  {m.label:<36} {m.per_second:8,.0f} jobs/s  PostgreSQL CPU "
            f"{cpu * 1e3:6.2f} ms/job  ({m.per_second / peer.per_second:.2f}x the jobs/s, "
            f"goal >= {LG_PG_GOAL}; {cpu / peer_cpu if peer_cpu else 0:.2f}x the "
            "PostgreSQL CPU, goal <= 1)")


def _available(systems: list[str], postgres: str) -> set[str]:
    """The systems asked for that can run here; one line for each that cannot, and the
    versions and durability settings of each that can."""
    available = {"leasegate"} & set(systems)
    for peer in (s for s in systems if s != "leasegate"):
        lacking = missing(peer)
        if not lacking and peer == "procrastinate":
            try:
                server = postgres_settings(postgres)
            except RuntimeError as error:
                lacking = [str(error)]
        if lacking:
            say(f"  {peer}: not run, missing {', '.join(lacking)}; to install: {INSTALL[peer]}")
            continue
        available.add(peer)
        if peer == "beanstalkd":
            say(f"  {version(['beanstalkd', '-v'])} (-f 0: fsync every write), greenstalk "
                f"{metadata.version('greenstalk')}")
        elif peer == "rq":
            redis = version(["redis-server", "--version"]).partition(" v=")[2].split(" ")[0]
            say(f"  RQ {metadata.version('rq')} on redis-server {redis} (appendonly yes, "
                f"appendfsync always)")
        else:
            say(f"  procrastinate {metadata.version('procrastinate')} on {server}")
    return available


def _run_all(available: set[str], tmp: Path, args: argparse.Namespace
             ) -> tuple[list[Measured], list[lifecycle.Outcome], RouteCost | None]:
    """Every run, ordered so that the runs a target compares come close in time (the
    machine's load drifts)."""
    jobs, fast, procs = args.jobs, args.fast_jobs, args.procs
    runs: list[Measured] = []
    outcomes: list[lifecycle.Outcome] = []
    cost = None
    if "leasegate" in available:
        say("server CPU per submit, lease and result beside the bare route ...")
        cost = measure_route_cost(tmp / "route-cost")
    plan: list[tuple[str, str, Callable[[], Measured]]] = [
        ("leasegate", names.LG_QUERIES, lambda: _lg(names.LG_QUERIES, "queries", False)),
        ("procrastinate", names.PROCRASTINATE, lambda: run_peer(
            names.PROCRASTINATE, lambda: procrastinate_database(args.postgres),
            clients.produce_procrastinate, clients.consume_procrastinate, (), jobs, procs)),
        ("rq", names.RQ, lambda: run_peer(
            names.RQ, lambda: redis_server(tmp / "redis"), clients.produce_rq,
            clients.consume_rq, (), jobs, procs)),
        ("leasegate", names.LG_TASKS, lambda: _lg(names.LG_TASKS, "tasks", False)),
        ("beanstalkd", names.BEANSTALKD, lambda: run_peer(
            names.BEANSTALKD, lambda: beanstalkd(tmp / "beanstalkd"),
            clients.produce_beanstalkd, clients.consume_beanstalkd, (False,), fast, procs)),
        ("beanstalkd", names.BEANSTALKD_PIPELINED, lambda: run_peer(
            names.BEANSTALKD_PIPELINED, lambda: beanstalkd(tmp / "beanstalkd-pipelined"),
            clients.produce_beanstalkd, clients.consume_beanstalkd, (True,), fast, procs)),
        ("leasegate", names.LG_QUERIES_BATCHED,
         lambda: _lg(names.LG_QUERIES_BATCHED, "queries", True)),
        ("leasegate", names.LG_TASKS_BATCHED,
         lambda: _lg(names.LG_TASKS_BATCHED, "tasks", True)),
    ]

    def _lg_pg(label: str, channel: str) -> Callable[[], Measured]:
        return lambda: run_leasegate_postgres(label, lifecycle.Mode(channel, False),
                                              tmp / f"lg-pg-{channel}", jobs, procs,
                                              args.postgres)

    if "procrastinate" in available:
        # leasegate on procrastinate's server, beside it: the same PostgreSQL, its CPU
        plan[2:2] = [("leasegate", LG_PG_QUERIES, _lg_pg(LG_PG_QUERIES, "queries")),
                     ("leasegate", LG_PG_TASKS, _lg_pg(LG_PG_TASKS, "tasks"))]

    def _lg(label: str, channel: str, batched: bool) -> Measured:
        measured, outcome = run_leasegate(label, lifecycle.Mode(channel, batched),
                                          tmp / f"lg-{len(outcomes)}",
                                          fast if batched else jobs, procs)
        outcomes.append(outcome)
        return measured

    for system, label, run in plan:
        if system not in available:
            continue
        say(f"{label} ...")
        measured = run()
        say(f"  {measured.skipped}" if measured.skipped else
            f"  {measured.done} jobs in {measured.seconds:.1f} s = {measured.per_second:,.0f}"
            f" jobs/s; submits {measured.submits_per_second:,.0f}/s")
        runs.append(measured)
    return runs, outcomes, cost


if __name__ == "__main__":
    sys.exit(main())
