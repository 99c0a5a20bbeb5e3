"""Server CPU per request of leasegate's submit, lease and result beside a bare
Quart-Trio route's, measured in one run (``bench/_route_cost.py``; ``bench/peers.py``
prints the same table among the rest)::

    .venv/bin/python bench/route_cost.py

Or of this tree beside another build of leasegate (a git revision, or a directory
holding a ``leasegate`` package: a copy with one change), in slices that alternate
between the two, to say what a change saves (docs/design-notes.md's table of the
framework reach-ins)::

    .venv/bin/python bench/route_cost.py --against HEAD~1 [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _load import LoadResult
from _report import route_cost_table, say
from _route_cost import ROUTES, RouteCost, measure_builds, measure_route_cost
from _servers import REPO


def _build(given: str, into: Path) -> Path:
    """A directory whose ``leasegate`` package is the build ``given`` names."""
    if (Path(given) / "leasegate").is_dir():
        return Path(given).resolve()
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", given, "leasegate"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _builds_table(names: tuple[str, str], runs: list[list[dict[str, LoadResult]]]) -> None:
    """Per route: each build's server CPU per request over every round, and what the
    other build saves (or costs) against this tree's, as a share of this tree's."""
    say()
    say(f"Server CPU per request, {names[0]} (the baseline) beside {names[1]}, "
        f"{len(runs)} round(s) of alternating slices")
    say(f"{'route':8} {'baseline us':>12} {'other us':>10} {'other - baseline':>17} "
        f"{'share':>7} {'requests':>9} {'errors':>7}")
    for route in (*ROUTES, "all"):
        totals = [LoadResult(), LoadResult()]
        for run in runs:
            for side in (0, 1):
                for part in ROUTES if route == "all" else (route,):
                    totals[side].absorb(run[side][part])
        ours, other = (RouteCost.per_request_us(t) for t in totals)
        say(f"{route:8} {ours:12,.0f} {other:10,.0f} {other - ours:+17,.1f} "
            f"{(other - ours) / max(ours, 1):+7.1%} {totals[0].ok:>4,}/{totals[1].ok:<4,} "
            f"{totals[0].errors + totals[1].errors:>7}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="a git revision, or a directory with a leasegate "
                        "package: measured beside this tree")
    parser.add_argument("--build", default=None, help="with --against: the baseline, if "
                        "not this tree (a revision or a directory, as --against)")
    parser.add_argument("--rounds", type=int, default=1, help="with --against: fresh "
                        "servers this many times")
    args = parser.parse_args()
    say(f"machine load {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min), "
        f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="leasegate-route-cost-") as tmp:
        if args.against is None:
            route_cost_table(measure_route_cost(Path(tmp) / "route-cost"))
            return 0
        base = REPO if args.build is None else _build(args.build, Path(tmp) / "base")
        builds = (base, _build(args.against, Path(tmp) / "build"))
        runs = [measure_builds(builds, Path(tmp) / f"round-{n}") for n in range(args.rounds)]
    _builds_table((args.build or "this tree", args.against), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
