"""leasegate lifecycle benchmark: whole jobs per second, submit to result.

One run (``.venv/bin/python bench/lifecycle.py``, a few minutes at the default
10,000 jobs; ``--jobs 1000`` for a quick look) prints, for each mode:

* queries, unbatched: ``--procs`` producer processes submit with
  ``Client.submit_query``, as many consumer processes run an
  ``AsyncWorker(batch=10)`` (leases of up to 10, results on the next lease call);
* tasks, unbatched: the same with ``Client.submit_task`` (spread over
  ``LANES`` accounts: one task in flight per lane), the tasks of a lease call
  started in one call;
* queries and tasks, batched: producers submit 100 jobs a call with
  ``Client.submit_many_queries`` / ``submit_many_tasks``, consumers run an
  ``AsyncWorker(batch=100)`` (leases of up to 100, the tasks started in one
  call, results reported together after a short linger). A server without
  the batch endpoints (404/405) is reported as "batched: endpoint not available";

each against a fresh ``leasegate serve`` (fresh data dir, durable defaults:
``sqlite_synchronous=FULL``; rate limiting off), producers and consumers
started together. For each: jobs/s (first submit to last result), the
submit call's p50/p99 as the producers saw it, and the server's CPU per job
(user + system of the server process, all threads, from /proc).

With ``--database URL --gateways N`` (URL: a PostgreSQL server; each mode gets a
fresh database on it, dropped after), every mode also runs on PostgreSQL with 1, 2,
... N gateways (``leasegate serve --database``) beside SQLite, in the same run: the
producers and consumers are spread over the gateways (process p uses gateway p mod
N); the CPU per job is the gateways' (all of them), and ``db CPU/job`` that of the
PostgreSQL backends serving the mode's database (other databases' on a shared server
left out), with a table of the locks each run held and waited on and the capacity
they project for 1, 2, 4 and 8 gateways (``bench/_locks.py``).

Beside them, measured in the same run, the bare-route baseline: ``POST /v1/queries``
from 32 keep-alive clients against leasegate and against ``bench/baseline_app.py`` (a
bare Quart-Trio route under the same hypercorn config), in alternating slices, with
the server CPU per request of each. Other processes on the machine are noisy: compare a
mode's CPU per job with the baseline's CPU per request, not with another
run's figures.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as MPEvent
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _load import (
    DEADLINE_SECONDS,
    LoadResult,
    closed_loop,
    open_clients,
    wait_idle,
)
from _locks import LockSampler, LockTable, report_locks
from _readings import DatabaseCpu, machine_busy_seconds
from _report import percentile, say, table
from _servers import (
    Running,
    Served,
    Setup,
    start_baseline,
    start_leasegate,
    start_setup,
    stop,
    stop_setup,
)

ENV = {"LEASEGATE_RATE_LIMIT_PER_SECOND": "0"}
SITE = "bench"
KIND = "echo"
LANES = 1000  # accounts the tasks are spread over (one task in flight per lane)
LEASE_MAX = 10
BATCH = 100
WAIT_SECONDS = 1.0  # consumers' long-poll: short, so they notice the end soon
BASELINE_CLIENTS = 32
BASELINE_SLICES = 4
BASELINE_SLICE_SECONDS = 1.5
SUBMIT = b'{"site": "bench", "kind": "echo", "params": {"n": 1}}'
# Targets of the issue that asked for this bench (jobs/s on a 2-core machine).
TARGETS = {("queries", False): 450, ("tasks", False): 300,
           ("queries", True): 4000, ("tasks", True): 2500}


@dataclass
class Mode:
    channel: str  # "queries" | "tasks"
    batched: bool

    @property
    def label(self) -> str:
        return f"{self.channel}, {'batched' if self.batched else 'unbatched'}"

    @property
    def id_field(self) -> str:
        return "task_id" if self.channel == "tasks" else "query_id"


@dataclass
class Outcome:
    mode: Mode
    jobs: int = 0
    done: int = 0
    seconds: float = 0.0
    server_cpu: float = 0.0
    db_cpu: float = 0.0  # PostgreSQL's server processes (None of it on SQLite)
    others_cpu: float = 0.0
    submit_s: list[float] = field(default_factory=list)  # one per submit call
    calls: Counter[str] = field(default_factory=Counter)  # requests by kind
    failures: Counter[str] = field(default_factory=Counter)
    requests: int = 0  # HTTP requests the server counted (its /metrics), all kinds
    skipped: str | None = None
    setup: Setup = field(default_factory=Setup)  # SQLite, unless run with --database
    locks: LockTable | None = None  # PostgreSQL: what the run held and waited on

    @property
    def per_second(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0


# ---- producers and consumers (each in a process of its own) ------------------------------


def _job_body(mode: Mode, n: int) -> dict[str, Any]:
    body: dict[str, Any] = {"site": SITE, "kind": KIND, "params": {"n": n}}
    if mode.channel == "tasks":
        body["account"] = f"a{n % LANES}"
    return body


def produce(url: str, key: str, mode: Mode, first: int, count: int, go: MPEvent,
            out: mp.Queue[tuple[str, Any]]) -> None:
    from leasegate.client import Client, LeasegateError, TransportError

    latencies: list[float] = []
    failures: Counter[str] = Counter()
    calls = 0
    with Client(url, key, timeout=30) as client:
        go.wait()
        if not mode.batched:
            for n in range(first, first + count):
                body = _job_body(mode, n)
                began = time.perf_counter()
                try:
                    if mode.channel == "tasks":
                        client.submit_task(SITE, KIND, body["params"], account=body["account"])
                    else:
                        client.submit_query(SITE, KIND, body["params"])
                except (LeasegateError, TransportError) as error:
                    failures[type(error).__name__] += 1
                latencies.append(time.perf_counter() - began)
                calls += 1
        else:
            submit_many = (client.submit_many_tasks if mode.channel == "tasks"
                           else client.submit_many_queries)
            for start in range(first, first + count, BATCH):
                items = [{**_job_body(mode, n), mode.id_field: f"b{n}"}
                         for n in range(start, min(start + BATCH, first + count))]
                began = time.perf_counter()
                try:
                    answers: list[Any] = list(submit_many(items))
                except (LeasegateError, TransportError) as error:
                    failures[f"batch {type(error).__name__}"] += len(items)
                    answers = []
                latencies.append(time.perf_counter() - began)
                calls += 1
                for answer in answers:
                    if isinstance(answer, LeasegateError):
                        failures[f"item {type(answer).__name__}"] += 1
    out.put(("producer", (latencies, failures, calls)))


def consume(url: str, key: str, mode: Mode, worker_id: str, jobs: int, handled: Any,
            go: MPEvent, out: mp.Queue[tuple[str, Any]]) -> None:
    calls: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    trio.run(_consume_with_worker, url, key, mode, worker_id, jobs, handled, go, calls,
             failures)
    out.put(("consumer", (calls, failures)))


def _count(handled: Any, n: int) -> int:
    with handled.get_lock():
        handled.value += n
        return int(handled.value)


async def _consume_with_worker(url: str, key: str, mode: Mode, worker_id: str, jobs: int,
                               handled: Any, go: MPEvent, calls: Counter[str],
                               failures: Counter[str]) -> None:
    """The SDK's AsyncWorker, ``batch=10`` (batched: ``batch=100``): leases of up to 10,
    the tasks started in one call, the results on the next lease call; stopped once
    every job was handled."""
    from leasegate.client import AsyncJob, AsyncWorker

    worker = AsyncWorker(url, key, worker_id, channel=mode.channel,  # type: ignore[arg-type]
                         wait_seconds=WAIT_SECONDS, timeout=30,
                         batch=BATCH if mode.batched else LEASE_MAX)

    async def handler(job: AsyncJob) -> dict[str, Any]:
        calls["handled"] += 1
        _count(handled, 1)
        return {"n": job.params.get("n")}

    async def watch() -> None:
        # The count is shared with other processes: nothing to wait on but the clock.
        while handled.value < jobs:  # noqa: ASYNC110
            await trio.sleep(0.05)
        worker.stop()

    async with worker, trio.open_nursery() as nursery:
        await trio.to_thread.run_sync(go.wait)
        nursery.start_soon(watch)
        await worker.run(handler)
        nursery.cancel_scope.cancel()


# ---- one mode against a fresh server ---------------------------------------------------------


def batch_endpoints(served: Served | Running, channel: str) -> bool:
    """Whether the server has ``POST /v1/{channel}/batch`` (an empty batch is a 400 there)."""
    reply = httpx.post(f"{served.url}/v1/{channel}/batch", json={"items": []},
                       headers={"Authorization": f"Bearer {served.keys['client']}"}, timeout=10)
    return reply.status_code not in (404, 405)


def run_mode(mode: Mode, setup: Setup, data: Path, jobs: int, procs: int) -> Outcome:
    outcome = Outcome(mode, jobs, setup=setup)
    served = start_setup(setup, data, ENV)
    urls = served.urls
    try:
        if mode.batched and not batch_endpoints(served, mode.channel):
            outcome.skipped = "batched: endpoint not available"
            return outcome
        ctx = mp.get_context("spawn")
        go = ctx.Event()
        handled = ctx.Value("q", 0)
        out: mp.Queue[tuple[str, Any]] = ctx.Queue()
        shares = [jobs // procs + (1 if p < jobs % procs else 0) for p in range(procs)]
        children = [ctx.Process(target=produce, args=(
            urls[p % len(urls)], served.keys["client"], mode, sum(shares[:p]), shares[p], go,
            out)) for p in range(procs)]
        children += [ctx.Process(target=consume, args=(
            urls[p % len(urls)], served.keys["worker"], mode, f"bench-c{p}", jobs, handled,
            go, out)) for p in range(procs)]
        for child in children:
            child.start()
        # The clock starts once every child has imported the SDK and opened its client
        # (8 processes importing on 2 cores take seconds); each waits on ``go`` then.
        wait_idle(children)
        sampler = LockSampler(served.database) if served.database else None
        db_cpu = DatabaseCpu(served.database) if served.database else None
        if db_cpu is not None:
            db_cpu.start()
        cpu0, all0, began = served.cpu_seconds(), machine_busy_seconds(), time.perf_counter()
        if sampler is not None:
            sampler.start()
        go.set()
        reports = _collect(out, len(children), began + DEADLINE_SECONDS, outcome)
        outcome.seconds = time.perf_counter() - began
        outcome.server_cpu = served.cpu_seconds() - cpu0
        if sampler is not None:
            outcome.locks = sampler.stop()
        outcome.db_cpu = (db_cpu.seconds() - (sampler.own_cpu if sampler else 0.0)
                          if db_cpu is not None else 0.0)
        outcome.others_cpu = max(0.0, machine_busy_seconds() - all0 - outcome.server_cpu
                                 - outcome.db_cpu)
        outcome.done = int(handled.value)
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
        if reports < len(children):
            outcome.failures[f"{len(children) - reports} processes did not finish"] += 1
        outcome.requests = sum(served_requests(s) for s in served.servers)
        return outcome
    finally:
        stop_setup(served)


def served_requests(served: Served) -> int:
    """The server's own count of HTTP requests (``leasegate_http_requests_total``),
    but for the scrapes of ``/metrics``."""
    reply = httpx.get(f"{served.url}/metrics", timeout=10,
                      headers={"Authorization": f"Bearer {served.keys['admin']}"})
    reply.raise_for_status()
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in reply.text.splitlines()
                   if line.startswith("leasegate_http_requests_total{")
                   and 'route="/metrics"' not in line))


def _collect(out: mp.Queue[tuple[str, Any]], expected: int, deadline: float,
             outcome: Outcome) -> int:
    reports = 0
    while reports < expected and time.perf_counter() < deadline:
        try:
            role, payload = out.get(timeout=1.0)
        except Exception:  # queue.Empty: keep waiting until the deadline
            continue
        reports += 1
        if role == "producer":
            latencies, failures, calls = payload
            outcome.submit_s += latencies
            outcome.failures.update(failures)
            outcome.calls["submit"] += calls
        else:
            calls, failures = payload
            outcome.calls.update(calls)
            outcome.failures.update(failures)
    return reports


# ---- the bare-route baseline ----------------------------------------------------------------


async def _baseline_slices(lg: Served, base: Served) -> dict[str, LoadResult]:
    totals = {"leasegate": LoadResult(), "baseline": LoadResult()}
    lg_auth = {"Authorization": f"Bearer {lg.keys['client']}"}
    async with (open_clients(BASELINE_CLIENTS, lg.url, lg_auth, 10) as lg_clients,
                open_clients(BASELINE_CLIENTS, base.url, {}, 10) as base_clients):
        order = [(lg, lg_clients), (base, base_clients)]
        for target, clients in order:  # warm-up, not counted
            await closed_loop(clients, "/v1/queries", SUBMIT, 201, 0.5, target.pid)
        for n in range(BASELINE_SLICES):
            for target, clients in order if n % 2 == 0 else order[::-1]:
                part = await closed_loop(clients, "/v1/queries", SUBMIT, 201,
                                         BASELINE_SLICE_SECONDS, target.pid)
                totals[target.name].absorb(part)
    return totals


def measure_baseline(data: Path) -> dict[str, LoadResult]:
    lg = start_leasegate(data, ENV)
    base = start_baseline(ENV)
    try:
        return trio.run(_baseline_slices, lg, base)
    finally:
        stop(lg)
        stop(base)


# ---- report ----------------------------------------------------------------------------------


def _us(cpu: float, n: int) -> float:
    return cpu / max(n, 1) * 1e6


def report(outcomes: list[Outcome], baseline: dict[str, LoadResult]) -> None:
    lg, base = baseline["leasegate"], baseline["baseline"]
    say()
    say(f"Bare-route baseline (same run): POST /v1/queries, "
        f"{BASELINE_CLIENTS} clients, {BASELINE_SLICES} alternating slices")
    for name, r in (("leasegate", lg), ("bare Quart-Trio", base)):
        say(f"  {name:<16} {r.per_second:7.0f} submits/s  server CPU "
            f"{_us(r.server_cpu, r.ok):5.0f} us/request  "
            f"p50 {percentile(r.latencies, 50) * 1e3:.1f} ms  ({r.errors} errors)")
    ratio = lg.per_second / base.per_second if base.per_second else 0.0
    say(f"  ratio leasegate / bare: {ratio:.2f} (target >= 0.9); CPU per submit "
        f"{_us(lg.server_cpu, lg.ok) / max(_us(base.server_cpu, base.ok), 1):.2f}x the bare route")
    say()
    say("Lifecycle (submit -> lease -> [start] -> result), fresh server per mode, "
        "sqlite_synchronous FULL, rate limiting off")
    heads = ("mode", "engine", "jobs/s", "target", "submit p50/p99 ms", "server CPU/job",
             "x bare route", "db CPU/job", "requests/job", "other procs")
    rows = []
    bare_us = _us(base.server_cpu, base.ok)
    for o in outcomes:
        if o.skipped:
            rows.append((o.mode.label, o.setup.label, o.skipped, "", "", "", "", "", "", ""))
            continue
        per_job = _us(o.server_cpu, o.done)
        db = f"{_us(o.db_cpu, o.done) / 1e3:.2f} ms" if o.setup.server else ""
        rows.append((
            o.mode.label, o.setup.label, f"{o.per_second:,.0f}",
            f">= {TARGETS[(o.mode.channel, o.mode.batched)]:,}",
            f"{percentile(o.submit_s, 50) * 1e3:.1f} / {percentile(o.submit_s, 99) * 1e3:.1f}",
            f"{per_job / 1e3:.2f} ms", f"{per_job / max(bare_us, 1):.1f}", db,
            f"{o.requests / max(o.done, 1):.2f}",
            f"{o.others_cpu / max(o.seconds, 1e-9):.2f} cores"))
    table(heads, rows, indent="")
    for o in outcomes:
        if not o.skipped:
            shortfall = "" if o.done >= o.jobs else f"; ONLY {o.done} of {o.jobs} jobs done"
            failures = ", ".join(f"{k}: {n}" for k, n in o.failures.most_common(4)) or "none"
            say(f"  {o.mode.label}, {o.setup.label}: {o.done} jobs in {o.seconds:.1f} s"
                f"{shortfall}; failures: {failures}")
    say("  (submit p50/p99 is per call: one job unbatched, up to 100 batched; requests/job "
        "is every request the server counted: submits, leases, starts, results, probes;")
    say("   server CPU/job is every gateway's, db CPU/job that of the database's own "
        "PostgreSQL backends but the lock sampler's)")
    report_locks([(o.mode.label, o.setup.gateways, o.per_second, _us(o.server_cpu, o.done),
                   _us(o.db_cpu, o.done), o.locks)
                  for o in outcomes if o.locks is not None and not o.skipped])


def load_parser(description: str | None, jobs: int, per: str) -> argparse.ArgumentParser:
    """A lifecycle bench's arguments (this one's, and peers.py's), starting with its
    load: ``--jobs`` through ``--procs`` producer and as many consumer processes."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=jobs, help=f"jobs per {per}")
    parser.add_argument("--procs", type=int, default=4,
                        help="producer processes, and as many consumer processes")
    return parser


def main() -> int:
    parser = load_parser(__doc__, 10_000, "mode")
    parser.add_argument("--only", choices=("queries", "tasks"), default=None,
                        help="one channel only")
    parser.add_argument("--unbatched", action="store_true", help="skip the batched modes")
    parser.add_argument("--batched", action="store_true", help="skip the unbatched modes")
    parser.add_argument("--database", metavar="URL", default=None,
                        help="a PostgreSQL server: run every mode there too, on a fresh "
                             "database each")
    parser.add_argument("--gateways", type=int, default=2,
                        help="with --database: run with 1 to N gateways (default 2)")
    args = parser.parse_args()
    if args.jobs < 1 or args.procs < 1 or args.gateways < 1:
        parser.error("--jobs, --procs and --gateways must be at least 1")
    setups = [Setup()] + ([Setup(args.database, n) for n in range(1, args.gateways + 1)]
                          if args.database else [])
    began = time.perf_counter()
    say(f"leasegate lifecycle bench: {args.jobs} jobs per mode, {args.procs} producer and "
        f"{args.procs} consumer processes, SDK clients")
    modes = [Mode(channel, batched) for batched in (False, True)
             for channel in ("queries", "tasks")
             if (args.only in (None, channel)) and not (batched and args.unbatched)
             and not (not batched and args.batched)]
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="leasegate-lifecycle-") as tmp:
        say("measuring the bare-route baseline ...")
        baseline = measure_baseline(Path(tmp) / "baseline")
        for n, mode in enumerate(modes):
            for s, setup in enumerate(setups):
                say(f"{mode.label}, {setup.label} ...")
                outcome = run_mode(mode, setup, Path(tmp) / f"mode-{n}-{s}", args.jobs,
                                   args.procs)
                if outcome.skipped:
                    say(f"  {outcome.skipped}")
                outcomes.append(outcome)
    report(outcomes, baseline)
    say(f"\ntotal run time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
