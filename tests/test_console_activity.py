"""The overview's charts and failures by site come from the job history in the
database: they count what happened before a restart, on both engines."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from leasegate.actors.queue.activity import Activity, Minute
from leasegate.clock import Clock
from leasegate.http.console.activity import charts
from leasegate.settings import Settings
from leasegate.storage import activity_sql
from leasegate.storage.connection import connect
from leasegate.storage.migrations import migrate
from tests.conftest import Gateway, start_gateway
from tests.test_console_operator import signed_in
from tests.test_query_plans import plan, recording

pytestmark = pytest.mark.both_engines


async def _work(gateway: Gateway) -> None:
    """Two tasks submitted; 2 s later both leased (first leases); one fails, one
    succeeds."""
    for task_id in ("a1", "a2"):
        status, _ = await gateway.call("POST", "/v1/tasks", "t1", json={
            "task_id": task_id, "site": "shop", "account": task_id, "kind": "k"})
        assert status == 201
    await trio.sleep(2)
    _, leased = await gateway.call("POST", "/v1/tasks/lease", "worker", json={
        "worker_id": "w1", "wait_seconds": 0, "max": 2})
    for item, outcome in zip(leased["items"], ("failed", "succeeded"), strict=True):
        fence = {"worker_id": "w1", "lease_token": item["lease_token"]}
        await gateway.call("POST", f"/v1/tasks/{item['task_id']}/start", "worker", json=fence)
        status, _ = await gateway.call("POST", f"/v1/tasks/{item['task_id']}/result",
                                       "worker", json={**fence, "outcome": outcome})
        assert status == 200


async def _overview(gateway: Gateway) -> str:
    await signed_in(gateway)
    html: str = await (await gateway.client.get("/console/")).get_data(as_text=True)
    return html


async def test_the_charts_and_failures_survive_a_restart(
        tmp_path: Path, settings: Settings, clock: Clock, autojump_clock: object) -> None:
    path = tmp_path / "leasegate.db"
    async with trio.open_nursery() as first_run:
        first = await start_gateway(first_run, path, settings, clock)
        await _work(first)
        first_run.cancel_scope.cancel()
    async with trio.open_nursery() as second_run:
        second = await start_gateway(second_run, path, settings, clock)
        html = await _overview(second)
        assert "submits per minute: 2 in all, peak 2" in html
        assert "completions per minute: 2 in all" in html
        assert "mean per minute): peak 2000 ms" in html
        row = html.split('<tr data-site="shop">', 1)[1].split("</tr>", 1)[0]
        assert [cell.split(">")[-1] for cell in row.split("</td>")[1:5]] == ["1", "0", "1", "0"]
        second_run.cancel_scope.cancel()


def test_the_charts_sum_the_channels_by_minute_and_keep_the_last_hour() -> None:
    now = 3600.0 * 5 + 30
    minute = int(now // 60)
    tasks = Activity((Minute(minute - 60, 9, 9, 1, 9.0),  # over an hour ago: left out
                      Minute(minute - 1, 1, 0, 1, 2.0), Minute(minute, 2, 1, 0, 0.0)), ())
    queries = Activity((Minute(minute - 1, 1, 0, 1, 1.0),), ())
    found = {chart.name: chart for chart in charts(now, tasks, queries)}
    assert found["submits"].caption == "submits per minute: 4 in all, peak 2"
    assert found["completions"].caption == "completions per minute: 1 in all, peak 1"
    assert found["dispatch latency"].caption.endswith("peak 1500 ms")
    assert found["submits"].top_label == "2 /min"  # the y axis: 0 to a round top
    assert len(found["submits"].points.split()) == 60


def test_the_activity_reads_are_ranges_of_the_time_index(tmp_path: Path) -> None:
    """Each read is a range of ``job_events_by_time``: never a walk of the history."""
    conn = connect(tmp_path / "plans.db", synchronous="OFF")
    migrate(conn)
    recorder = recording(conn)
    activity_sql.per_minute(recorder, "task", 0.0, 3600.0)
    activity_sql.failures_by_site(recorder, "task", 0.0, 82_800.0, 86_400.0, 20)
    assert len(recorder.statements) == 2
    for sql, args in recorder.statements:
        lines = plan(conn, sql, args)
        assert any("job_events USING INDEX job_events_by_time (channel=? AND at>? AND at<?)"
                   in line for line in lines), lines
        assert not any(line.startswith("SCAN job_events") for line in lines), lines
