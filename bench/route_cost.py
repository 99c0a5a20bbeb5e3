"""Server CPU per request of leasegate's submit, lease and result beside a bare
Quart-Trio route's, measured in one run (``bench/_route_cost.py``; ``bench/peers.py``
prints the same table among the rest)::

    .venv/bin/python bench/route_cost.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import route_cost_table, say
from _route_cost import measure_route_cost


def main() -> int:
    say(f"machine load {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min), "
        f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="leasegate-route-cost-") as tmp:
        cost = measure_route_cost(Path(tmp) / "route-cost")
    route_cost_table(cost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
