"""bench/peers.py's verdicts on the issue's targets (the bench itself is run by hand,
never in the suite: it takes minutes and times real servers)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import _report as peers
from _load import Measured


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


def test_what_a_target_leaves_for_leasegate_is_the_time_a_job_less_the_framework() -> None:
    queries = Measured("leasegate", "queries", 1000, done=1000, seconds=10.0,
                       busy_seconds=10.0, server_cpu=3.0, server_busy_cpu=3.0,
                       machine_busy_cpu=5.0, requests=1500)
    tasks = Measured("leasegate", "tasks", 1000, done=1000, seconds=10.0, busy_seconds=10.0,
                     server_cpu=4.0, server_busy_cpu=4.0, machine_busy_cpu=6.0,
                     requests=3500)
    rates = {peers.LG_QUERIES: 100.0, peers.LG_TASKS: 100.0, peers.PROCRASTINATE: 400.0,
             peers.RQ: 300.0}

    rows = peers.reach_rows({m.label: m for m in (queries, tasks)}, rates, 800.0, 2)

    # queries >= 1.5x procrastinate: 600 jobs/s, 1,667 us a job; the bare route's part
    # 1.5 requests x 800 us; ours 3,000 - 1,200; the clients 2,000 us a job.
    assert rows[0] == (
        "queries, one job a request, SDK workers >= 1.5x procrastinate", "600", "1,667 us",
        "1,200 us (1.50 x 800)", "467 us", "1,800 us (3.9x too much)", "1.92 of 2")
    assert rows[1][1:3] == ("600", "1,667 us")  # >= 2x RQ: the same rate
    # tasks >= 1.0x procrastinate: 3.5 requests a job of the bare route are over 2,500 us
    assert rows[2] == (
        "tasks, one job a request, SDK workers >= 1.0x procrastinate", "400", "2,500 us",
        "2,800 us (3.50 x 800)", "none", "1,200 us", "1.92 of 2")
    assert len(rows) == 3  # the batched runs and beanstalkd did not run
    assert peers.reach_rows({}, rates, 800.0, 2) == []


def test_the_lock_table_bounds_capacity_by_exclusive_holds_only(
        capsys: pytest.CaptureFixture[str]) -> None:
    """bench/lifecycle.py --database: a lock held exclusive 20% of a run at 100 jobs/s
    saturates at 500 jobs/s and caps the projection; a lock held shared only does not."""
    import _locks

    table = _locks.LockTable(samples=100)
    table.held["advisory: ledger account"] = 20
    table.shared["advisory: job ids tasks"] = 90
    one = ("tasks, unbatched", 1, 100.0, 2000.0, 500.0, table)  # 2 ms of gateway CPU a job
    two = ("tasks, unbatched", 2, 150.0, 2100.0, 500.0, table)
    _locks.report_locks([one, two])
    out = capsys.readouterr().out
    assert "saturates 500 jobs/s  OVER 10%" in out
    assert "shared only  90.0%" in out and "never (never held exclusive)" in out
    assert "1: 2.00 ms, 2: 2.10 ms (1.05x with 2)" in out
    # N x 500 jobs/s (1 / 2 ms), capped at the lock's 500 jobs/s
    assert "projected: 1: 500 jobs/s (0.2 db cores); 2: 500 jobs/s" in out
    assert ("held more than 10% of a run: advisory: ledger account (tasks, unbatched, 1 "
            "gateway(s): 20%)") in out
    del table.held["advisory: ledger account"]
    _locks.report_locks([one, two])
    assert "no lock on the hot path held more than 10% of the run" in capsys.readouterr().out
