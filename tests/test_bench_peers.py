"""bench/peers.py's verdicts on the issue's targets (the bench itself is run by hand,
never in the suite: it takes minutes and times real servers)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import _peer_report as peers


def test_each_target_is_judged_on_its_own_ratio_and_a_run_left_out_is_not_judged() -> None:
    rates = {peers.LG_QUERIES: 600.0, peers.PROCRASTINATE: 400.0, peers.RQ: 301.0,
             peers.LG_TASKS: 390.0, peers.LG_QUERIES_BATCHED: 3000.0}
    cost = {"bare": 600.0, "submit": 780.0, "lease": 790.0, "result": 300.0}

    rows = {text: (measured, verdict) for text, measured, verdict
            in peers.target_rows(rates, cost)}

    assert [v for _, v in rows.values()] == [
        "met", "NOT MET", "met",  # submit 1.3x, lease 1.32x, result under
        "met", "NOT MET", "NOT MET",  # queries 1.5x procrastinate, 1.99x RQ; tasks 0.97x
        "-", "-",  # beanstalkd did not run; nor did leasegate's batched tasks
    ]
    assert rows["queries, one job a request, SDK workers >= 2x RQ"][0] == \
        "1.99x (600 vs 301 jobs/s)"
    assert rows["server CPU per lease <= 1.3x the bare route's"][0] == "1.32x (790 vs 600 us)"
    batched_tasks = rows["tasks batched 100 a call >= 1.0x beanstalkd (pipelined 100)"][0]
    assert batched_tasks == "not measured (beanstalkd, pipelined 100 did not run)"
    assert all(v == "-" for _, _, v in peers.target_rows({}, None))
