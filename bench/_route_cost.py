"""Server CPU per request of leasegate's submit, lease and result, beside a bare
Quart-Trio route's, for ``bench/peers.py``.

Submits and the bare route: ``lifecycle.py``'s baseline (as ``bench/dispatch.py``:
``POST /v1/queries`` from 32 keep-alive clients, alternating slices against leasegate
and ``bench/baseline_app.py``). The slices leave thousands of queries queued on that
leasegate; the same 32 clients then lease them one a call (``max`` 1, no wait) and
report each one's result, a phase each, with the server's CPU over each phase. Each
of those phases goes in slices too, alternating with slices of the bare route: each
route's ratio is to the bare route measured beside it (the machine's speed drifts by
half within a minute here, so a bare figure taken before a phase is not its own).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio
from _load import LoadResult, closed_loop, open_clients
from _readings import cpu_seconds, machine_busy_seconds
from _servers import Served, start_baseline, start_leasegate, stop
from lifecycle import BASELINE_CLIENTS, ENV, SUBMIT, _baseline_slices

LEASE_CALLS = 4_800  # at most, over all clients (fewer if fewer are queued)
PHASE_SECONDS = 15.0  # each phase ends by then whatever is left
PHASE_SLICES = 4  # each of the lease and result phases, alternating with the bare route
BARE_SLICE_SECONDS = 0.5  # each bare-route slice beside them


@dataclass
class RouteCost:
    bare: LoadResult  # bench/baseline_app.py's POST /v1/queries, every slice
    submit: LoadResult  # leasegate's POST /v1/queries
    lease: LoadResult  # POST /v1/queries/lease, max 1
    result: LoadResult  # POST /v1/queries/{id}/result
    beside: dict[str, LoadResult]  # per route, the bare slices that alternated with it

    @staticmethod
    def per_request_us(r: LoadResult) -> float:
        return r.server_cpu / max(r.ok, 1) * 1e6


Work = Callable[[int, httpx.AsyncClient, LoadResult], Awaitable[None]]


async def _timed(clients: list[httpx.AsyncClient], server_pid: int, work: Work) -> LoadResult:
    """``work(i, client, result)`` for each client at once; the server's CPU meanwhile."""
    result = LoadResult()
    cpu0, own0, all0 = cpu_seconds(server_pid), time.process_time(), machine_busy_seconds()
    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i, client in enumerate(clients):
            nursery.start_soon(work, i, client, result)
    result.duration = time.perf_counter() - began
    result.server_cpu = cpu_seconds(server_pid) - cpu0
    result.generator_cpu = time.process_time() - own0
    result.machine_cpu = machine_busy_seconds() - all0
    return result


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any], expect: int,
                result: LoadResult) -> Any:
    """The reply's JSON if its status is ``expect``, else None (counted as an error)."""
    began = time.perf_counter()
    try:
        reply = await client.post(path, json=body)
    except httpx.HTTPError as exc:
        result.errors += 1
        result.failures[type(exc).__name__] += 1
        return None
    finally:
        result.latencies.append(time.perf_counter() - began)
    if reply.status_code != expect:
        result.errors += 1
        result.failures[f"HTTP {reply.status_code}"] += 1
        return None
    result.ok += 1
    return reply.json()


async def _sliced(route: list[httpx.AsyncClient], server_pid: int, work: Work,
                  base: list[httpx.AsyncClient], base_pid: int
                  ) -> tuple[LoadResult, LoadResult]:
    """``work`` in :data:`PHASE_SLICES` slices (each call of it does a slice's share), in
    turn with as many slices of the bare route, the order swapped every other slice;
    the totals of each."""
    ours, bare = LoadResult(), LoadResult()
    for n in range(PHASE_SLICES):
        for side in ("ours", "bare") if n % 2 == 0 else ("bare", "ours"):
            if side == "ours":
                ours.absorb(await _timed(route, server_pid, work))
            else:
                bare.absorb(await closed_loop(base, "/v1/queries", SUBMIT, 201,
                                              BARE_SLICE_SECONDS, base_pid))
    return ours, bare


async def _lease_and_result(lg: Served, base: Served
                            ) -> tuple[LoadResult, LoadResult, LoadResult, LoadResult]:
    """The lease phase and the result phase, and the bare route beside each."""
    auth = {"Authorization": f"Bearer {lg.keys['worker']}"}
    leased: list[list[tuple[str, str]]] = [[] for _ in range(BASELINE_CLIENTS)]
    reported = [0] * BASELINE_CLIENTS
    per_slice = LEASE_CALLS // BASELINE_CLIENTS // PHASE_SLICES
    end = [0.0]

    async def lease(i: int, client: httpx.AsyncClient, result: LoadResult) -> None:
        body = {"worker_id": f"cost-{i}", "max": 1, "wait_seconds": 0}
        for _ in range(per_slice):
            reply = await _post(client, "/v1/queries/lease", body, 200, result)
            items = reply["items"] if reply else []
            if not items or time.perf_counter() > end[0]:
                break
            leased[i].append((items[0]["query_id"], items[0]["lease_token"]))

    async def report(i: int, client: httpx.AsyncClient, result: LoadResult) -> None:
        for query_id, token in leased[i][reported[i]:reported[i] + per_slice]:
            if time.perf_counter() > end[0]:
                break
            reported[i] += 1
            body = {"worker_id": f"cost-{i}", "lease_token": token, "outcome": "succeeded",
                    "result": {"n": 1}}
            await _post(client, f"/v1/queries/{query_id}/result", body, 200, result)

    async with (open_clients(BASELINE_CLIENTS, lg.url, auth, 10) as clients,
                open_clients(BASELINE_CLIENTS, base.url, {}, 10) as base_clients):
        end[0] = time.perf_counter() + PHASE_SECONDS
        leases, bare_leases = await _sliced(clients, lg.pid, lease, base_clients, base.pid)
        end[0] = time.perf_counter() + PHASE_SECONDS
        results, bare_results = await _sliced(clients, lg.pid, report, base_clients, base.pid)
    return leases, bare_leases, results, bare_results


async def _measure(lg: Served, base: Served) -> RouteCost:
    slices = await _baseline_slices(lg, base)
    lease, bare_lease, result, bare_result = await _lease_and_result(lg, base)
    bare = LoadResult()
    for part in (slices["baseline"], bare_lease, bare_result):
        bare.absorb(part)
    return RouteCost(bare, slices["leasegate"], lease, result,
                     {"submit": slices["baseline"], "lease": bare_lease,
                      "result": bare_result})


def measure_route_cost(data: Path) -> RouteCost:
    """A fresh leasegate and the bare route, each stopped on return."""
    lg = start_leasegate(data, ENV)
    try:
        base = start_baseline(ENV)
        try:
            return trio.run(_measure, lg, base)
        finally:
            stop(base)
    finally:
        stop(lg)
