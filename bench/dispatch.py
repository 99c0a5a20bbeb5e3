"""leasegate dispatch benchmark: submit throughput, dispatch latency, parked-poll memory.

One run (``.venv/bin/python bench/dispatch.py``, about a minute and a half) prints:

1. acknowledged ``POST /v1/queries`` per second over HTTP (201 received), 32
   concurrent clients with a keep-alive connection each, against the real
   ``leasegate serve`` (default ``sqlite_synchronous=FULL``) on a fresh data dir;
2. the same load against a bare Quart-Trio route (``bench/baseline_app.py``)
   under the same hypercorn config;
3. their ratio (target >= 0.7);
4. dispatch latency p50/p99, submit -> a parked long-poll worker holds the
   lease (target p99 <= 10 ms on loopback);
5. server RSS idle and with 1,000 parked long-polls;
6. the cost of the ledger's hold at submit: acknowledged ``POST /v1/queries``
   and ``POST /v1/tasks`` per second without ``max_cost`` and with
   ``max_cost`` 1 (the bootstrap client's tenant credited enough first), the
   four loads in alternating slices against one more fresh ``leasegate
   serve`` (32 clients again), with the server CPU per submit of each load
   and the ledger's group commits meanwhile, and for each channel the ratio
   with / without (target >= 0.5: holds must not halve the submit rate).
   Afterwards the tenant's ``held`` must equal the acknowledged submits with
   ``max_cost`` (each held 1, none settled: nothing is leased in this run) and
   ``GET /v1/ledger/audit`` must pass.

Sections 1-3 and 6 alternate their loads in slices (A B B A ...), so noise
from other processes on the machine hits every load alike.

Both servers run with ``LEASEGATE_RATE_LIMIT_PER_SECOND=0`` (rate limiting
off). The load generator is Python (httpx under trio) in this process; it is
the same for both targets, so if it is the bottleneck the ratio is still fair
(and the CPU figures say so).
"""

from __future__ import annotations

import contextlib
import operator
import resource
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _load import (
    LoadResult,
    Served,
    actor_gauge,
    closed_loop,
    cpu_seconds,
    fsync_ms,
    machine_busy_seconds,
    open_clients,
    parked_queries,
    percentile,
    rss_kib,
    start_baseline,
    start_leasegate,
    stop,
    wait_until,
)
from _report import PARKED_POLLS, Figures, describe, report, say

ENV = {"LEASEGATE_RATE_LIMIT_PER_SECOND": "0"}
CLIENTS = 32
WARMUP_SECONDS = 2.0
LOAD_SECONDS = 10.0  # per target, in SLICES alternating slices
SLICES = 5
LATENCY_WORKERS = 8
LATENCY_WARMUP = 25
LATENCY_SAMPLES = 500
LATENCY_BUDGET_SECONDS = 30.0
PARK_BUDGET_SECONDS = 20.0
PARK_BATCH = 50
PARK_ATTEMPTS = 3
SUBMIT = b'{"site": "bench", "kind": "echo", "params": {"n": 1}}'
HELD = b'{"site": "bench", "kind": "echo", "params": {"n": 1}, "max_cost": 1}'
COMMITS = "leasegate_actor_commits_total"
HOLD_WARMUP_SECONDS = 1.0  # per load
HOLD_LOAD_SECONDS = 6.0  # per load, in SLICES alternating slices
HOLD_TENANT = "default"  # the bootstrap client key's tenant
HOLD_CREDIT = 2**50  # far more than any run can hold at max_cost 1
# (label, path, body): each channel without and with max_cost, side by side.
HOLD_ACTORS = ("queries", "tasks", "ledger")
HOLD_LOADS = (("queries", "/v1/queries", SUBMIT), ("queries+max_cost", "/v1/queries", HELD),
              ("tasks", "/v1/tasks", SUBMIT), ("tasks+max_cost", "/v1/tasks", HELD))


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# ---- 1-3: submit throughput ------------------------------------------------------------


async def throughput(lg: Served, base: Served, figures: Figures) -> None:
    """Warm each target up, then alternate slices (A B B A ...) so drift hits both alike."""
    targets = [(lg, auth(lg.keys["client"])), (base, {})]
    async with contextlib.AsyncExitStack() as stack:
        admin = await stack.enter_async_context(one_client(lg, "admin"))
        pools = [await stack.enter_async_context(open_clients(CLIENTS, t.url, headers, 10))
                 for t, headers in targets]
        for (target, _), clients in zip(targets, pools, strict=True):
            warm = await closed_loop(clients, "/v1/queries", SUBMIT, 201, WARMUP_SECONDS,
                                     target.pid)
            describe(f"{target.name} warm-up", warm)
        totals = {target.name: LoadResult() for target, _ in targets}
        order = [(target, clients) for (target, _), clients in zip(targets, pools, strict=True)]
        commits = await actor_gauge(admin, COMMITS)
        for n in range(SLICES):
            for target, clients in (order if n % 2 == 0 else order[::-1]):
                part = await closed_loop(clients, "/v1/queries", SUBMIT, 201,
                                         LOAD_SECONDS / SLICES, target.pid)
                totals[target.name].absorb(part)
        figures.commits = await actor_gauge(admin, COMMITS) - commits
    for name, total in totals.items():
        describe(f"{name} measured", total)
        say(f"  {'':<19} per slice: " + " ".join(f"{r:.0f}" for r in total.slices) + " /s")
    say(f"  leasegate group commits (queries actor) during its slices: {figures.commits:.0f}, "
        f"{totals['leasegate'].ok / max(figures.commits, 1):.1f} submits per commit")
    figures.throughput.update(totals)


def one_client(served: Served, role: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=served.url, headers=auth(served.keys[role]), timeout=10)


# ---- 4: dispatch latency ----------------------------------------------------------------


async def dispatch_latency(served: Served, figures: Figures) -> None:
    """Submit one query at a time; time until a parked worker holds its lease."""
    leased_send, leased_recv = trio.open_memory_channel[tuple[dict[str, Any], float]](1000)

    async def worker(n: int, client: httpx.AsyncClient) -> None:
        body = {"worker_id": f"bench-w{n}", "wait_seconds": 30}
        for _ in range(10 * (LATENCY_SAMPLES + LATENCY_WARMUP)):  # bounded; cancelled at end
            reply = await client.post("/v1/queries/lease", json=body)
            arrived = time.perf_counter()
            if reply.status_code != 200:
                figures.latency_errors += 1
                await trio.sleep(0.05)
                continue
            for item in reply.json()["items"]:
                leased_send.send_nowait((item, arrived))

    url, keys = served.url, served.keys
    async with (open_clients(LATENCY_WORKERS, url, auth(keys["worker"]), 40) as workers,
                open_clients(1, url, auth(keys["client"]), 10) as [up],
                open_clients(1, url, auth(keys["worker"]), 10) as [rep],
                open_clients(1, url, auth(keys["admin"]), 10) as [admin],
                trio.open_nursery() as nursery):
        for n, client in enumerate(workers):
            nursery.start_soon(worker, n, client)
        parked, _ = await wait_until(lambda n: n >= LATENCY_WORKERS, admin, within=10)
        say(f"  {parked} workers parked on POST /v1/queries/lease (wait_seconds 30)")
        started = time.perf_counter()
        cpu0, own0, all0 = cpu_seconds(served.pid), time.process_time(), machine_busy_seconds()
        for i in range(LATENCY_WARMUP + LATENCY_SAMPLES):
            if time.perf_counter() - started > LATENCY_BUDGET_SECONDS:
                say(f"  time budget spent after {i} submits")
                break
            query_id = f"lat-{i}"
            body = {"query_id": query_id, "site": "bench", "kind": "echo", "params": {"i": i}}
            sent = time.perf_counter()
            submitted = await up.post("/v1/queries", json=body)
            acked = time.perf_counter()
            lease: dict[str, Any] | None = None
            with trio.move_on_after(5):
                lease, arrived = await leased_recv.receive()
            if submitted.status_code != 201 or lease is None or lease["query_id"] != query_id:
                figures.latency_errors += 1
                continue
            if i >= LATENCY_WARMUP:
                figures.dispatch_ms.append((arrived - sent) * 1e3)
                figures.ack_ms.append((acked - sent) * 1e3)
            # Finish it (outside the timed part) so nothing is left leased.
            await rep.post(f"/v1/queries/{query_id}/result", json={
                "worker_id": "bench", "lease_token": lease["lease_token"],
                "outcome": "succeeded", "result": {}})
        figures.latency_seconds = took = time.perf_counter() - started
        others = (machine_busy_seconds() - all0) - (cpu_seconds(served.pid) - cpu0) \
            - (time.process_time() - own0)
        figures.latency_others_cores = max(0.0, others) / took
        nursery.cancel_scope.cancel()


# ---- 5: RSS with 1,000 parked long-polls ---------------------------------------------------


async def parked_memory(served: Served, figures: Figures) -> None:
    admin_headers = auth(served.keys["admin"])
    async with open_clients(1, served.url, admin_headers, request_timeout=10) as [admin]:
        left, _ = await wait_until(lambda n: n == 0, admin, within=10)
        await trio.sleep(0.5)
        figures.rss_idle_kib = rss_kib(served.pid)
        say(f"  idle (after the latency run, {left} parked): "
            f"VmRSS {figures.rss_idle_kib / 1024:.1f} MiB")

        limits = httpx.Limits(max_connections=PARKED_POLLS, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=served.url, headers=auth(served.keys["worker"]),
                                     timeout=40, limits=limits) as pool:

            async def park(n: int) -> None:
                body = {"worker_id": f"park-{n}", "wait_seconds": 30}
                for attempt in range(PARK_ATTEMPTS):
                    try:
                        reply = await pool.post("/v1/queries/lease", json=body)
                    except httpx.TransportError as exc:
                        figures.park_failures[type(exc).__name__] += 1
                        if attempt + 1 < PARK_ATTEMPTS:
                            await trio.sleep(0.2)
                        continue
                    # Nothing should come back before we let go.
                    figures.park_failures[f"returned early: HTTP {reply.status_code}"] += 1
                    return

            async with trio.open_nursery() as nursery:
                # Batches, each waited for, so the accept queue never overflows.
                started = time.perf_counter()
                for first in range(0, PARKED_POLLS, PARK_BATCH):
                    for n in range(first, min(first + PARK_BATCH, PARKED_POLLS)):
                        nursery.start_soon(park, n)
                    opened = min(first + PARK_BATCH, PARKED_POLLS)
                    await wait_until(partial(operator.le, opened), admin, within=5)  # opened <= n
                    if time.perf_counter() - started > PARK_BUDGET_SECONDS:
                        break
                parked, _ = await wait_until(lambda n: n >= PARKED_POLLS, admin, within=5)
                took = time.perf_counter() - started
                await trio.sleep(1.0)
                figures.parked_seen = await parked_queries(admin)
                figures.rss_parked_kib = rss_kib(served.pid)
                say(f"  {parked} parked after {took:.1f} s; 1 s later {figures.parked_seen} "
                    f"parked: VmRSS {figures.rss_parked_kib / 1024:.1f} MiB")
                nursery.cancel_scope.cancel()  # closes the 1,000 connections

        figures.parked_left, took = await wait_until(lambda n: n == 0, admin, within=10)
        await trio.sleep(0.5)
        figures.rss_released_kib = rss_kib(served.pid)
        say(f"  connections closed: {figures.parked_left} still parked after {took:.1f} s; "
            f"VmRSS {figures.rss_released_kib / 1024:.1f} MiB")


# ---- 6: the ledger's hold at submit -----------------------------------------------------


async def hold_cost(served: Served, figures: Figures) -> None:
    """Submits without and with ``max_cost`` on both channels, in alternating slices."""
    async with (one_client(served, "admin") as admin,
                open_clients(CLIENTS, served.url, auth(served.keys["client"]), 10) as clients):
        reply = await admin.post(f"/v1/ledger/accounts/{HOLD_TENANT}/credit",
                                 json={"amount": HOLD_CREDIT, "ref": "bench"})
        reply.raise_for_status()
        held = 0
        say("  warm-up:")
        for label, path, body in HOLD_LOADS:
            warm = await closed_loop(clients, path, body, 201, HOLD_WARMUP_SECONDS, served.pid)
            describe(label, warm)
            held += warm.ok if body == HELD else 0
        totals = {label: LoadResult() for label, _, _ in HOLD_LOADS}
        commits = {actor: await actor_gauge(admin, COMMITS, actor) for actor in HOLD_ACTORS}
        for n in range(SLICES):
            for label, path, body in (HOLD_LOADS if n % 2 == 0 else HOLD_LOADS[::-1]):
                part = await closed_loop(clients, path, body, 201, HOLD_LOAD_SECONDS / SLICES,
                                         served.pid)
                totals[label].absorb(part)
        for actor in HOLD_ACTORS:
            figures.hold_commits[actor] = await actor_gauge(admin, COMMITS, actor) \
                - commits[actor]
        say("  measured:")
        for label, _, body in HOLD_LOADS:
            total = totals[label]
            describe(label, total)
            say(f"  {'':<19} per slice: " + " ".join(f"{r:.0f}" for r in total.slices) + " /s")
            held += total.ok if body == HELD else 0
        say("  group commits during the slices: " + ", ".join(
            f"{actor} {n:.0f}" for actor, n in figures.hold_commits.items()))
        figures.holds.update(totals)

        reply = await admin.get(f"/v1/ledger/accounts/{HOLD_TENANT}")
        reply.raise_for_status()
        figures.held_expected, figures.held_seen = held, int(reply.json()["held"])
        started = time.perf_counter()
        reply = await admin.get("/v1/ledger/audit", timeout=60)
        reply.raise_for_status()
        figures.audit_ok = bool(reply.json()["ok"])
        say(f"  afterwards: {HOLD_TENANT} holds {figures.held_seen} for {held} acknowledged "
            f"submits with max_cost 1; audit {'passed' if figures.audit_ok else 'FAILED'} "
            f"({time.perf_counter() - started:.2f} s)")


# ---- the run -----------------------------------------------------------------------------


def raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))  # children inherit it


def main() -> int:
    began = time.perf_counter()
    raise_fd_limit(4 * PARKED_POLLS)
    figures = Figures()
    say(f"leasegate dispatch bench: rate limiting off (LEASEGATE_RATE_LIMIT_PER_SECOND=0), "
        f"sqlite_synchronous default (FULL); {CLIENTS} clients x 1 keep-alive connection; "
        f"load from httpx under trio in this process (the same generator for both targets).")
    servers: list[Served] = []
    with tempfile.TemporaryDirectory(prefix="leasegate-bench-") as tmp:
        try:
            say(f"\n[1-2] POST /v1/queries, {CLIENTS} clients each: leasegate (fresh data dir) "
                f"and the bare Quart-Trio baseline (bench/baseline_app.py); warm-up "
                f"{WARMUP_SECONDS:.0f} s each, then {LOAD_SECONDS:.0f} s each in {SLICES} "
                f"alternating slices")
            lg = start_leasegate(Path(tmp) / "throughput", ENV)
            servers.append(lg)
            base = start_baseline(ENV)
            servers.append(base)
            trio.run(throughput, lg, base, figures)
            stop(lg)
            stop(base)

            say(f"\n[4] dispatch latency: {LATENCY_WORKERS} parked workers, "
                f"{LATENCY_WARMUP} warm-up + {LATENCY_SAMPLES} submits one at a time "
                f"(fresh data dir)")
            served = start_leasegate(Path(tmp) / "dispatch", ENV)
            servers.append(served)
            trio.run(dispatch_latency, served, figures)
            say(f"  {len(figures.dispatch_ms)} samples in {figures.latency_seconds:.1f} s: "
                f"p50 {percentile(figures.dispatch_ms, 50):.2f} ms, "
                f"p99 {percentile(figures.dispatch_ms, 99):.2f} ms; other processes used "
                f"{figures.latency_others_cores:.2f} cores meanwhile")
            figures.fsync_ms = fsync_ms(Path(tmp))
            say(f"  for reference, 4 KiB append + fsync on this disk ({len(figures.fsync_ms)} "
                f"times): p50 {percentile(figures.fsync_ms, 50):.2f} ms, "
                f"p99 {percentile(figures.fsync_ms, 99):.2f} ms (one per group commit)")

            say(f"\n[5] server RSS with {PARKED_POLLS:,} parked long-polls (same server)")
            trio.run(parked_memory, served, figures)
            stop(served)

            say(f"\n[6] the ledger's hold at submit: POST /v1/queries and POST /v1/tasks "
                f"without and with max_cost 1, {CLIENTS} clients (fresh data dir, tenant "
                f"{HOLD_TENANT} credited first); warm-up {HOLD_WARMUP_SECONDS:.0f} s each, then "
                f"{HOLD_LOAD_SECONDS:.0f} s each in {SLICES} alternating slices")
            ledgered = start_leasegate(Path(tmp) / "holds", ENV)
            servers.append(ledgered)
            trio.run(hold_cost, ledgered, figures)
        finally:
            for server in servers:
                stop(server)
    report(figures)
    say(f"\ntotal run time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
