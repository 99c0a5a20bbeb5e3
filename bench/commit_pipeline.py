"""SQLite's commit pipeline, measured: the same load with it on and off, in one run.

``.venv/bin/python bench/commit_pipeline.py [--jobs 4000] [--rounds 2] [--base DIR]``
(a few minutes) serves, each from a fresh ``leasegate serve`` (durable defaults, rate
limiting off), one variant after the other, the order turned round every round (the
machine's load drifts):

* ``pipeline``: this tree with ``LEASEGATE_SQLITE_COMMIT_PIPELINE=true`` (turns
  commit with NORMAL, one thread syncs the WAL, answers wait for it);
* ``no pipeline``: this tree with it false, the default (SQLite syncs inside each
  COMMIT, holding the write lock);
* ``base``: with ``--base DIR``, the checkout in DIR (its own ``.venv``), e.g. main.

For each: the batched lifecycles of ``bench/peers.py`` (4 producer processes
submitting 100 jobs a call, 4 SDK workers leasing 100), queries and tasks: jobs/s,
submits/s, server CPU per job, the submit call's p50/p99; then one client sending
``POST /v1/queries`` one at a time (``bench/stages.py``'s measurement): wall and CPU
per request and the storage thread's apply + commit. The disk's fsync p50/p99 is
printed first: it is what a commit waits for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _peer_clients as clients
import lifecycle
from _load import Measured, run_clients
from _readings import fsync_ms
from _report import percentile, say
from _servers import start_leasegate, stop

ON = {"LEASEGATE_SQLITE_COMMIT_PIPELINE": "true"}
OFF = {"LEASEGATE_SQLITE_COMMIT_PIPELINE": "false"}
APPLY = "apply + commit (storage thread)"
COMMIT = "commit (fsync)"


@dataclass
class Variant:
    name: str
    python: str
    tree: Path
    env: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[Measured]] = field(default_factory=dict)
    one_client: list[dict[str, object]] = field(default_factory=list)


def lifecycle_run(variant: Variant, channel: str, data: Path, jobs: int, procs: int
                  ) -> Measured:
    """One batched lifecycle against a fresh server of ``variant``."""
    mode = lifecycle.Mode(channel, batched=True)
    served = start_leasegate(data, {**lifecycle.ENV, **variant.env}, timeout=180,
                             python=variant.python)
    measured = Measured(variant.name, mode.label, jobs)
    try:
        run_clients(measured, *clients.leasegate(served, mode), procs, served.pid)
    finally:
        stop(served)
    return measured


def one_client(variant: Variant, requests: int) -> dict[str, object]:
    """``bench/stages.py --target leasegate`` of ``variant``'s tree: its figures."""
    done = subprocess.run(
        [variant.python, "-P", str(variant.tree / "bench" / "stages.py"), "--target",
         "leasegate", "--requests", str(requests)], capture_output=True, text=True,
        check=True, timeout=900, cwd=variant.tree, env={**os.environ, **variant.env})
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def report(variants: list[Variant], channels: tuple[str, ...]) -> None:
    first = variants[0]
    say(f"\n  {'batched lifecycle (100 a call)':<34} {'jobs/s':>8} {'ratio':>6} "
        f"{'submits/s':>10} {'CPU/job us':>11} {'submit p50':>11} {'p99 ms':>7}")
    for channel in channels:
        label = lifecycle.Mode(channel, True).label
        base = _mean([m.per_second for m in first.runs[label]])
        for v in variants:
            runs = v.runs[label]
            rate = _mean([m.per_second for m in runs])
            cpu = _mean([(m.server_cpu or 0.0) / max(m.done, 1) * 1e6 for m in runs])
            submits = [s for m in runs for s in m.submit_s]
            say(f"  {label + ', ' + v.name:<34} {rate:>8,.0f} {rate / max(base, 1e-9):>6.2f} "
                f"{_mean([m.submits_per_second for m in runs]):>10,.0f} {cpu:>11,.0f} "
                f"{percentile(submits, 50) * 1e3:>10.1f}  {percentile(submits, 99) * 1e3:>6.1f}"
                f"   (runs: {', '.join(f'{m.per_second:,.0f}' for m in runs)})")
    if not any(v.one_client for v in variants):
        return
    say(f"\n  {'one client, POST /v1/queries':<34} {'wall us':>8} {'CPU us':>8} "
        f"{'apply+commit wall':>18} {'commit wall':>12}")
    for v in variants:
        walls = [float(str(f["wall"])) for f in v.one_client]
        cpus = [float(str(f["cpu"])) for f in v.one_client]
        stage = {label: [] for label in (APPLY, COMMIT)}  # type: dict[str, list[float]]
        for figures in v.one_client:
            for label, _, _, wall, _ in figures["stages"]:  # type: ignore[attr-defined]
                if label in stage:
                    stage[label].append(wall)
        say(f"  {v.name:<34} {_mean(walls):>8,.0f} {_mean(cpus):>8,.0f} "
            f"{_mean(stage[APPLY]):>18,.0f} {_mean(stage[COMMIT]):>12,.0f}")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=4_000, help="jobs per lifecycle run")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=1000,
                        help="one-client submits per variant and round (0: none)")
    parser.add_argument("--only", choices=("queries", "tasks"), default=None)
    parser.add_argument("--base", type=Path, default=None,
                        help="a checkout with its own .venv to measure beside (e.g. main)")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    variants = [Variant("pipeline", sys.executable, here, dict(ON)),
                Variant("no pipeline", sys.executable, here, dict(OFF))]
    if args.base is not None:
        base = args.base.resolve()
        variants.append(Variant(f"base ({base.name})", str(base / ".venv" / "bin" / "python"),
                                base))
    channels = (args.only,) if args.only else ("queries", "tasks")
    say(f"commit pipeline: {args.jobs} jobs a batched run, {args.procs} producer and "
        f"{args.procs} consumer processes, {args.rounds} rounds; machine load "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="leasegate-pipeline-") as tmp:
        floor = fsync_ms(Path(tmp))
        say(f"  4 KiB append + fsync here: p50 {percentile(floor, 50):.2f} ms, "
            f"p99 {percentile(floor, 99):.2f} ms")
        n = 0
        for r in range(args.rounds):
            order = variants if r % 2 == 0 else variants[::-1]
            for channel in channels:
                for v in order:
                    n += 1
                    m = lifecycle_run(v, channel, Path(tmp) / f"run-{n}", args.jobs, args.procs)
                    v.runs.setdefault(m.mode, []).append(m)
                    say(f"  round {r + 1}, {m.mode}, {v.name}: {m.per_second:,.0f} jobs/s")
            for v in order if args.requests else ():
                v.one_client.append(one_client(v, args.requests))
    report(variants, channels)
    say(f"\nmachine load at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
