"""What ``bench/dispatch.py`` measured, and how it prints it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from _load import LoadResult, percentile

RATIO_TARGET = 0.7
HOLD_RATIO_TARGET = 0.5  # submits with max_cost / without: holds must not halve the rate
P99_TARGET_MS = 10.0
PARKED_POLLS = 1000


@dataclass
class Figures:
    throughput: dict[str, LoadResult] = field(default_factory=dict)
    commits: float = 0.0  # group commits of the queries actor during leasegate's slices
    dispatch_ms: list[float] = field(default_factory=list)
    ack_ms: list[float] = field(default_factory=list)
    latency_errors: int = 0
    latency_seconds: float = 0.0
    latency_others_cores: float = 0.0
    fsync_ms: list[float] = field(default_factory=list)
    rss_idle_kib: int = 0
    rss_parked_kib: int = 0
    rss_released_kib: int = 0
    parked_seen: int = 0
    parked_left: int = 0
    park_failures: Counter[str] = field(default_factory=Counter)
    holds: dict[str, LoadResult] = field(default_factory=dict)  # by load label
    hold_commits: dict[str, float] = field(default_factory=dict)  # by actor, during the slices
    held_expected: int = 0  # acknowledged submits with max_cost 1
    held_seen: int = 0  # the tenant's ``held`` afterwards
    audit_ok: bool = False


def say(text: str = "") -> None:
    print(text, flush=True)


def describe(label: str, r: LoadResult) -> None:
    failures = ", ".join(f"{k}: {n}" for k, n in r.failures.most_common(4)) or "none"
    say(f"  {label:<19} {r.ok:>6} acked {r.errors:>3} errors in {r.duration:5.2f} s"
        f" = {r.per_second:7.1f}/s; request p50 {percentile(r.latencies, 50) * 1e3:4.1f} ms"
        f" p99 {percentile(r.latencies, 99) * 1e3:5.1f} ms")
    say(f"  {'':<19} CPU (cores): server {r.server_cpu / r.duration:.2f}, generator "
        f"{r.generator_cpu / r.duration:.2f}, other processes {r.others_cpu / r.duration:.2f}"
        f"; server CPU per request {r.server_cpu / max(r.ok, 1) * 1e6:.0f} us; "
        f"errors: {failures}")


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def _ms(samples: list[float]) -> str:
    return f"{percentile(samples, 50):.2f} / {percentile(samples, 99):.2f} ms"


def report(figures: Figures) -> None:
    lg, base = figures.throughput["leasegate"], figures.throughput["baseline"]
    ratio = lg.per_second / base.per_second if base.per_second else 0.0
    p99 = percentile(figures.dispatch_ms, 99)
    per_poll = (figures.rss_parked_kib - figures.rss_idle_kib) / PARKED_POLLS
    batch = lg.ok / figures.commits if figures.commits else float("nan")
    rows = [
        ("submits/s, leasegate (FULL sync)", f"{lg.per_second:,.0f}/s",
         f"{lg.ok} acked, {lg.errors} err, {lg.duration:.1f} s", "-"),
        ("submits/s, bare Quart-Trio", f"{base.per_second:,.0f}/s",
         f"{base.ok} acked, {base.errors} err, {base.duration:.1f} s", "-"),
        ("ratio leasegate / baseline", f"{ratio:.2f}", "",
         f">= {RATIO_TARGET}  {_verdict(ratio >= RATIO_TARGET)}"),
        ("server CPU per submit", f"{lg.server_cpu / max(lg.ok, 1) * 1e6:.0f} us",
         f"baseline {base.server_cpu / max(base.ok, 1) * 1e6:.0f} us", "-"),
        ("submits per group commit", f"{batch:.1f}", f"{figures.commits:.0f} commits", "-"),
        ("dispatch latency p50", f"{percentile(figures.dispatch_ms, 50):.2f} ms",
         f"{len(figures.dispatch_ms)} samples", "-"),
        ("dispatch latency p99", f"{p99:.2f} ms",
         f"{figures.latency_errors} err, max {max(figures.dispatch_ms, default=0):.2f} ms",
         f"<= {P99_TARGET_MS:.0f} ms  {_verdict(p99 <= P99_TARGET_MS)}"),
        ("submit ack p50 / p99 (same run)", _ms(figures.ack_ms), "", "-"),
        ("fsync p50 / p99 (this disk)", _ms(figures.fsync_ms), "4 KiB append + fsync", "-"),
        ("server RSS idle", f"{figures.rss_idle_kib / 1024:.1f} MiB", "", "-"),
        (f"server RSS, {PARKED_POLLS:,} parked polls", f"{figures.rss_parked_kib / 1024:.1f} MiB",
         f"+{per_poll:.1f} KiB per poll; {figures.parked_seen} parked", "-"),
        ("server RSS after release", f"{figures.rss_released_kib / 1024:.1f} MiB",
         f"{figures.parked_left} still parked", "-"),
    ]
    rows += hold_rows(figures)
    heads = ("figure", "value", "detail", "target")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
    say()
    say("Summary (rate limiting off: LEASEGATE_RATE_LIMIT_PER_SECOND=0)")
    say("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip())
    say("  ".join("-" * w for w in widths))
    for row in rows:
        say("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    notes(figures, lg, base)


def hold_rows(figures: Figures) -> list[tuple[str, str, str, str]]:
    """Each channel's submits without and with ``max_cost``, and their ratio."""
    rows: list[tuple[str, str, str, str]] = []
    for channel in ("queries", "tasks"):
        plain, held = figures.holds[channel], figures.holds[f"{channel}+max_cost"]
        ratio = held.per_second / plain.per_second if plain.per_second else 0.0
        for label, r in ((channel, plain), (f"{channel} + max_cost", held)):
            rows.append((f"submits/s, {label}", f"{r.per_second:,.0f}/s",
                         f"{r.ok} acked, {r.errors} err, {r.duration:.1f} s, "
                         f"{r.server_cpu / max(r.ok, 1) * 1e6:.0f} us server CPU each", "-"))
        rows.append((f"ratio with / without max_cost ({channel})", f"{ratio:.2f}", "",
                     f">= {HOLD_RATIO_TARGET}  {_verdict(ratio >= HOLD_RATIO_TARGET)}"))
    commits = figures.hold_commits.get("ledger", 0.0)
    holds = sum(r.ok for label, r in figures.holds.items() if label.endswith("+max_cost"))
    rows.append(("holds per ledger group commit", f"{holds / commits if commits else 0:.1f}",
                 f"{commits:.0f} commits", "-"))
    books = figures.held_seen == figures.held_expected and figures.audit_ok
    rows.append(("ledger afterwards", f"held {figures.held_seen}",
                 f"{figures.held_expected} held submits acked; audit "
                 f"{'passed' if figures.audit_ok else 'FAILED'}",
                 f"held = acked, audit ok  {_verdict(books)}"))
    return rows


def notes(figures: Figures, lg: LoadResult, base: LoadResult) -> None:
    loads = [lg, base, *figures.holds.values()]
    generator = max(r.generator_cpu / r.duration for r in loads if r.duration)
    if generator > 0.7:
        say(f"note: the load generator used up to {generator:.2f} cores; it is the same "
            f"generator for every load, so the ratios are fair, but the absolute rates are a "
            f"floor (generator and server share this machine's cores).")
    others = max(figures.latency_others_cores,
                 *(r.others_cpu / r.duration for r in loads if r.duration))
    if others > 0.2:
        say(f"note: other processes used up to {others:.2f} cores while measuring; the slices "
            f"alternate so every load shares that noise, but figures from a quiet machine "
            f"are more trustworthy.")
    if figures.park_failures:
        listed = ", ".join(f"{k}: {n}" for k, n in figures.park_failures.most_common())
        say(f"note: while parking the {PARKED_POLLS:,} long-polls: {listed}")
