"""Server CPU per request of leasegate's submit, lease and result: beside a bare
Quart-Trio route's, for ``bench/peers.py``; or of two builds of leasegate side by
side, for ``bench/route_cost.py --against``.

Submits and the bare route: ``lifecycle.py``'s baseline (as ``bench/lifecycle.py``:
``POST /v1/queries`` from 32 keep-alive clients, alternating slices against leasegate
and ``bench/baseline_app.py``). The slices leave thousands of queries queued on that
leasegate; the same 32 clients then lease them one a call (``max`` 1, no wait) and
report each one's result, a phase each, with the server's CPU over each phase. Each
of those phases goes in slices too, alternating with slices of the bare route: each
route's ratio is to the bare route measured beside it (the machine's speed drifts by
half within a minute here, so a bare figure taken before a phase is not its own).

Two builds (:func:`measure_builds`): each route's slices alternate between a server
of each build, the order swapped every other slice, so that the ratio of the two is
of the same minutes of the machine.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio
from _load import LoadResult, closed_loop, open_clients
from _readings import cpu_seconds, machine_busy_seconds
from _servers import (
    HOST,
    ROLES,
    Served,
    free_port,
    start_baseline,
    start_leasegate,
    start_process,
    stop,
)
from lifecycle import BASELINE_CLIENTS, BASELINE_SLICE_SECONDS, ENV, SUBMIT, _baseline_slices

LEASE_CALLS = 4_800  # at most, over all clients (fewer if fewer are queued)
PHASE_SECONDS = 15.0  # each phase ends by then whatever is left
PHASE_SLICES = 4  # each of the lease and result phases, alternating with the bare route
BARE_SLICE_SECONDS = 0.5  # each bare-route slice beside them
ROUTES = ("submit", "lease", "result")


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


Slice = Callable[[int], Awaitable[LoadResult]]


async def _alternate(sides: int, one_slice: Slice) -> list[LoadResult]:
    """:data:`PHASE_SLICES` rounds of ``one_slice(side)`` for each side in turn, the
    order reversed every other round; the totals of each side."""
    totals = [LoadResult() for _ in range(sides)]
    for n in range(PHASE_SLICES):
        order = range(sides) if n % 2 == 0 else range(sides - 1, -1, -1)
        for side in order:
            totals[side].absorb(await one_slice(side))
    return totals


@dataclass
class _Leaser:
    """One server's 32 clients, leasing one query a call, then reporting each result."""

    server: Served
    clients: list[httpx.AsyncClient]
    per_slice: int
    end: float = 0.0
    leased: list[list[tuple[str, str]]] = field(
        default_factory=lambda: [[] for _ in range(BASELINE_CLIENTS)])
    reported: list[int] = field(default_factory=lambda: [0] * BASELINE_CLIENTS)

    async def lease(self, i: int, client: httpx.AsyncClient, result: LoadResult) -> None:
        body = {"worker_id": f"cost-{i}", "max": 1, "wait_seconds": 0}
        for _ in range(self.per_slice):
            reply = await _post(client, "/v1/queries/lease", body, 200, result)
            items = reply["items"] if reply else []
            if not items or time.perf_counter() > self.end:
                break
            self.leased[i].append((items[0]["query_id"], items[0]["lease_token"]))

    async def report(self, i: int, client: httpx.AsyncClient, result: LoadResult) -> None:
        start = self.reported[i]
        for query_id, token in self.leased[i][start:start + self.per_slice]:
            if time.perf_counter() > self.end:
                break
            self.reported[i] += 1
            body = {"worker_id": f"cost-{i}", "lease_token": token, "outcome": "succeeded",
                    "result": {"n": 1}}
            await _post(client, f"/v1/queries/{query_id}/result", body, 200, result)

    def slice_of(self, phase: str) -> Callable[[], Awaitable[LoadResult]]:
        work = self.lease if phase == "lease" else self.report
        return lambda: _timed(self.clients, self.server.pid, work)


def _per_slice() -> int:
    return LEASE_CALLS // BASELINE_CLIENTS // PHASE_SLICES


async def _lease_and_result(lg: Served, base: Served
                            ) -> tuple[LoadResult, LoadResult, LoadResult, LoadResult]:
    """The lease phase and the result phase, and the bare route beside each."""
    auth = {"Authorization": f"Bearer {lg.keys['worker']}"}
    async with (open_clients(BASELINE_CLIENTS, lg.url, auth, 10) as clients,
                open_clients(BASELINE_CLIENTS, base.url, {}, 10) as base_clients):
        leaser = _Leaser(lg, clients, _per_slice())

        def bare() -> Awaitable[LoadResult]:
            return closed_loop(base_clients, "/v1/queries", SUBMIT, 201, BARE_SLICE_SECONDS,
                               base.pid)

        phases = []
        for phase in ("lease", "result"):
            leaser.end = time.perf_counter() + PHASE_SECONDS
            sides = (leaser.slice_of(phase), bare)

            def either(side: int, sides: tuple[Callable[[], Awaitable[LoadResult]], ...] = sides
                       ) -> Awaitable[LoadResult]:
                return sides[side]()

            phases += await _alternate(2, either)
    leases, bare_leases, results, bare_results = phases
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


# ---- two builds side by side ----------------------------------------------------------------

# ``leasegate serve`` with the package imported from the build's directory, before the
# repository's (the working directory, and the editable install); a build that starts
# itself again (``os.execve`` of ``sys.orig_argv``) runs the same build.
_BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from leasegate.cli import main; " \
        "sys.exit(main())"


def start_build(build: Path, data: Path) -> Served:
    """``leasegate serve`` on ``data`` from the ``leasegate`` package under ``build``."""
    port = free_port()
    argv = [sys.executable, "-c", _BOOT, str(build), "serve", "--data", str(data),
            "--host", HOST, "--port", str(port), "--log-level", "WARNING"]
    served = start_process(f"leasegate ({build})", argv, port, ENV)
    if set(ROLES) - set(served.keys):
        stop(served)
        raise RuntimeError(f"{build}: no bootstrap key printed")
    return served


async def _builds_side_by_side(servers: list[Served]) -> list[dict[str, LoadResult]]:
    """Each route's slices, alternating between ``servers``; per server, per route."""
    async with (open_clients(BASELINE_CLIENTS, servers[0].url, _auth(servers[0], "client"),
                             10) as submit0,
                open_clients(BASELINE_CLIENTS, servers[1].url, _auth(servers[1], "client"),
                             10) as submit1,
                open_clients(BASELINE_CLIENTS, servers[0].url, _auth(servers[0], "worker"),
                             10) as work0,
                open_clients(BASELINE_CLIENTS, servers[1].url, _auth(servers[1], "worker"),
                             10) as work1):
        submitters = (submit0, submit1)

        def submit(side: int, seconds: float = BASELINE_SLICE_SECONDS
                   ) -> Awaitable[LoadResult]:
            return closed_loop(submitters[side], "/v1/queries", SUBMIT, 201, seconds,
                               servers[side].pid)

        for side in (0, 1):  # warm-up, not counted
            await submit(side, 0.5)
        figures: list[dict[str, LoadResult]] = [{}, {}]
        for side, total in enumerate(await _alternate(2, submit)):
            figures[side]["submit"] = total
        leasers = [_Leaser(server, clients, _per_slice())
                   for server, clients in zip(servers, (work0, work1), strict=True)]
        for phase in ("lease", "result"):
            for leaser in leasers:
                leaser.end = time.perf_counter() + 2 * PHASE_SECONDS

            def of(side: int, phase: str = phase) -> Awaitable[LoadResult]:
                return leasers[side].slice_of(phase)()

            totals = await _alternate(2, of)
            for side, total in enumerate(totals):
                figures[side][phase] = total
    return figures


def _auth(server: Served, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.keys[role]}"}


def measure_builds(builds: tuple[Path, Path], data: Path) -> list[dict[str, LoadResult]]:
    """A fresh leasegate of each build (``data`` / 0 and 1), each stopped on return."""
    servers: list[Served] = []
    data.mkdir(parents=True)
    try:
        for n, build in enumerate(builds):
            servers.append(start_build(build, data / str(n)))
        return trio.run(_builds_side_by_side, servers)
    finally:
        for server in servers:
            stop(server)
