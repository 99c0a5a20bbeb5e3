"""What the benches print: lines, aligned tables and percentiles; and ``bench/peers.py``'s
tables: every system's rates, leasegate's ratio to each peer, the server CPU per
request beside the bare route's, and the issue's targets, each with its measured ratio
and met / not met."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from _load import Measured

if TYPE_CHECKING:
    from _route_cost import RouteCost


def say(text: str = "") -> None:
    print(text, flush=True)


def table(heads: tuple[str, ...], rows: Sequence[tuple[str, ...]], indent: str = "  ") -> None:
    """``rows`` under ``heads``, each column as wide as its widest cell."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    say(indent + "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip())
    say(indent + "  ".join("-" * w for w in widths))
    for row in rows:
        say(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]



# ---- bench/peers.py ---------------------------------------------------------------------

# The runs, by label ("system, mode").
LG_QUERIES = "leasegate, queries"
LG_TASKS = "leasegate, tasks"
LG_QUERIES_BATCHED = "leasegate, queries batched 100"
LG_TASKS_BATCHED = "leasegate, tasks batched 100"
BEANSTALKD = "beanstalkd, one put a request"
BEANSTALKD_PIPELINED = "beanstalkd, pipelined 100"
RQ = "RQ, SimpleWorker"
PROCRASTINATE = "procrastinate, concurrency 10"
PEERS = (BEANSTALKD, BEANSTALKD_PIPELINED, RQ, PROCRASTINATE)
OURS = (LG_QUERIES, LG_TASKS, LG_QUERIES_BATCHED, LG_TASKS_BATCHED)
ROUTE_CPU_TARGET = 1.3  # at most, times the bare route's server CPU per request


@dataclass(frozen=True)
class Target:
    """leasegate's run ``ours`` at least ``times`` the jobs/s of the peer's run ``peer``."""

    text: str
    ours: str
    peer: str
    times: float


TARGETS = (
    Target("queries, one job a request, SDK workers >= 1.5x procrastinate",
           LG_QUERIES, PROCRASTINATE, 1.5),
    Target("queries, one job a request, SDK workers >= 2x RQ", LG_QUERIES, RQ, 2.0),
    Target("tasks, one job a request, SDK workers >= 1.0x procrastinate",
           LG_TASKS, PROCRASTINATE, 1.0),
    # beanstalkd has no batch put: its batched twin is 100 puts pipelined a send.
    Target("queries batched 100 a call >= 1.5x beanstalkd (pipelined 100)",
           LG_QUERIES_BATCHED, BEANSTALKD_PIPELINED, 1.5),
    Target("tasks batched 100 a call >= 1.0x beanstalkd (pipelined 100)",
           LG_TASKS_BATCHED, BEANSTALKD_PIPELINED, 1.0),
)


def verdict(met: bool) -> str:
    return "met" if met else "NOT MET"


def target_rows(rates: dict[str, float], cost: dict[str, float] | None
                ) -> list[tuple[str, str, str]]:
    """``(target, measured, verdict)`` for each target. ``rates``: jobs/s by run label
    (a run that did not happen is absent, or 0); ``cost``: server CPU per request in µs
    of ``bare``, ``submit``, ``lease`` and ``result``, and ``bare beside <route>``, the bare
    route measured in turn with that route, where known (None: not measured). A ratio is
    judged as printed, to two decimals: the noise of a run is far larger."""
    rows: list[tuple[str, str, str]] = []
    for route in ("submit", "lease", "result"):
        text = f"server CPU per {route} <= {ROUTE_CPU_TARGET}x the bare route's"
        bare = 0.0 if cost is None else cost.get(f"bare beside {route}", cost.get("bare", 0))
        if cost is None or bare <= 0:
            rows.append((text, "not measured", "-"))
            continue
        times = round(cost[route] / bare, 2)
        rows.append((text, f"{times:.2f}x ({cost[route]:,.0f} vs {bare:,.0f} us)",
                     verdict(times <= ROUTE_CPU_TARGET)))
    for target in TARGETS:
        ours, peer = rates.get(target.ours, 0.0), rates.get(target.peer, 0.0)
        if ours <= 0 or peer <= 0:
            missing = target.peer if peer <= 0 else target.ours
            rows.append((target.text, f"not measured ({missing} did not run)", "-"))
            continue
        ratio = round(ours / peer, 2)
        rows.append((target.text, f"{ratio:.2f}x ({ours:,.0f} vs {peer:,.0f} jobs/s)",
                     verdict(ratio >= target.times)))
    return rows


def reach_rows(runs: dict[str, Measured], rates: dict[str, float], bare_us: float,
               cores: int) -> list[tuple[str, str, str, str, str, str, str]]:
    """How far each jobs/s target is from what this run's framework leaves: ``(target,
    jobs/s it needs, a job's time at one core, the bare route's CPU a job, what is left
    of it for leasegate's own work, what leasegate's own work costs a job now, the
    machine's cores the clients and the bare route alone would use at that rate)``.

    A gateway's HTTP work runs on its one event loop, at most one core: at ``n`` jobs/s
    a job may take ``1 / n`` of it. The framework's part (hypercorn, h11, Quart) is at
    least this run's requests a job times the bare route's server CPU a request
    (``bare_us``, measured at 32 clients; at 4 it measured no lower here); the rest is
    ours. The clients' CPU a job is every other process's, as this run measured it. A target whose
    run or peer is missing, or whose run counted no requests, has no row."""
    rows: list[tuple[str, str, str, str, str, str, str]] = []
    for target in TARGETS:
        run, peer = runs.get(target.ours), rates.get(target.peer, 0.0)
        if run is None or run.skipped or run.done <= 0 or run.requests <= 0 or peer <= 0:
            continue
        needed = target.times * peer
        a_job = 1e6 / needed
        per_job = run.requests / run.done
        framework = per_job * bare_us
        ours = (run.server_cpu or 0.0) / run.done * 1e6 - framework
        clients = run.others_busy_cpu / run.done  # the busy window ends at the last job
        machine = (clients * 1e6 + framework) * needed / 1e6
        left = a_job - framework
        rows.append((target.text, f"{needed:,.0f}", f"{a_job:,.0f} us",
                     f"{framework:,.0f} us ({per_job:.2f} x {bare_us:,.0f})",
                     f"{left:,.0f} us" if left > 0 else "none",
                     f"{ours:,.0f} us" + (f" ({ours / left:.1f}x too much)"
                                         if 0 < left < ours else ""),
                     f"{machine:.2f} of {cores}"))
    return rows


def reach_table(runs: list[Measured], rates: dict[str, float], cost: RouteCost | None,
                cores: int) -> None:
    """:func:`reach_rows`, printed (nothing without the bare route's figure)."""
    if cost is None:
        return
    rows = reach_rows({m.label: m for m in runs}, rates, cost.bare.cpu_us_per_request,
                      cores)
    if not rows:
        return
    say()
    say("What each target leaves for leasegate's own work (same run): a gateway's HTTP "
        "work runs on one event loop, at most one core")
    table(("target", "needs jobs/s", "a job at 1 core", "bare route a job (req/job x us)",
            "left for leasegate", "leasegate's own now", "clients + bare route, cores"),
           rows)
    say("  (leasegate's own: its server CPU a job less the bare route's part; clients: "
        "every other process's CPU a job in its run, SDK workers included)")


def _cores(m: Measured, cpu: float | None) -> str:
    return "n/a" if cpu is None else f"{cpu / max(m.busy_seconds, 1e-9):.2f}"


def systems_table(runs: list[Measured]) -> None:
    say()
    say("Every system, one run each (jobs/s: go to the last acknowledgement; submits/s: go "
        "to the last producer done)")
    rows: list[tuple[str, ...]] = []
    for m in runs:
        if m.skipped:
            rows.append((m.label, m.skipped, "", "", "", "", ""))
            continue
        per_job = ("n/a (shared)" if m.server_cpu is None
                   else f"{m.server_cpu / max(m.done, 1) * 1e6:,.0f} us")
        rows.append((m.label, f"{m.per_second:,.0f}", f"{m.submits_per_second:,.0f}",
                     f"{percentile(m.submit_s, 50) * 1e3:.1f} / "
                     f"{percentile(m.submit_s, 99) * 1e3:.1f}",
                     per_job, _cores(m, m.server_busy_cpu), _cores(m, m.machine_busy_cpu)))
    table(("system, mode", "jobs/s", "submits/s", "submit p50/p99 ms", "server CPU/job",
            "server cores", "machine cores"), rows)
    for m in runs:
        if m.skipped:
            continue
        short = "" if m.done >= m.jobs else f"; ONLY {m.done} of {m.jobs} jobs handled"
        failures = ", ".join(f"{k}: {n}" for k, n in m.failures.most_common(4)) or "none"
        if short or m.failures:
            say(f"  {m.label}: {m.done} jobs in {m.seconds:.1f} s{short}; failures: {failures}")
    say("  (submit p50/p99 is per call: one job, or up to 100 batched or pipelined; cores: "
        "while the jobs ran, machine = every process on it)")


def ratio_table(rates: dict[str, float]) -> None:
    peers = [p for p in PEERS if rates.get(p, 0) > 0]
    ours = [o for o in OURS if rates.get(o, 0) > 0]
    if not peers or not ours:
        return
    say()
    say("leasegate's jobs/s over each peer's (same run)")
    rows = [(o, *(f"{rates[o] / rates[p]:.2f}" for p in peers)) for o in ours]
    table(("leasegate \\ peer", *peers), rows)


def targets_table(rates: dict[str, float], cost: RouteCost | None) -> None:
    figures = None if cost is None else {
        **{name: getattr(cost, name).cpu_us_per_request
           for name in ("bare", "submit", "lease", "result")},
        **{f"bare beside {route}": cost.beside[route].cpu_us_per_request
           for route in ("submit", "lease", "result")}}
    if cost is not None:
        route_cost_table(cost)
    say()
    say("Targets (issue 21), ratios of this run")
    table(("target", "measured", "verdict"), target_rows(rates, figures))


def route_cost_table(cost: RouteCost) -> None:
    """Server CPU per request of each route beside the bare route's, and the ratio."""
    say()
    say("Server CPU per request, one job each, beside the bare route (same run; each "
        "route's slices alternate with the bare route's)")
    rows = [("bare Quart-Trio POST /v1/queries", f"{cost.bare.cpu_us_per_request:,.0f} us",
             f"{cost.bare.ok:,}", "", "1.00", f"{cost.bare.errors}")]
    for route, label, r in (("submit", "submit POST /v1/queries", cost.submit),
                            ("lease", "lease POST /v1/queries/lease, max 1", cost.lease),
                            ("result", "result POST /v1/queries/{id}/result", cost.result)):
        ours, bare = r.cpu_us_per_request, cost.beside[route].cpu_us_per_request
        rows.append((label, f"{ours:,.0f} us", f"{r.ok:,}", f"{bare:,.0f} us",
                     f"{ours / max(bare, 1):.2f}", f"{r.errors}"))
    table(("route", "server CPU/request", "requests", "bare route beside it", "x bare route",
            "errors"), rows)
