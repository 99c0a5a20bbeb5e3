"""Two gateways on one PostgreSQL database, each connection on its own thread as served,
hit at the same moment: their turns really overlap in the database, and the per-actor
turn lock, the constraints and the row locks keep every promise (real time, no
autojump: the threads must run)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import trio

from leasegate.clock import Clock
from leasegate.server import bootstrap_keys
from leasegate.settings import load
from leasegate.system import System, new_system
from tests.conftest import Gateway, start_gateway

Json = dict[str, Any]


async def two(nursery: trio.Nursery, tmp_path: Path, url: str) -> tuple[Gateway, Gateway]:
    base = load(environ={}, overrides={"database_url": url, "unsafe_durability": True})
    a = await start_gateway(nursery, tmp_path / "leasegate.db", base.replace(gateway="a"),
                            Clock(), inline=False)
    b = await start_gateway(nursery, tmp_path / "leasegate.db", base.replace(gateway="b"),
                            Clock(), inline=False)
    return a, b


async def together(*calls: Any) -> list[tuple[int, Json]]:
    """Run the calls ``(gateway, method, path, who, body)`` at once; their answers."""
    answers: list[tuple[int, Json]] = [(0, {})] * len(calls)

    async def one(i: int, gw: Gateway, method: str, path: str, who: str, body: Json) -> None:
        answers[i] = await gw.call(method, path, who, json=body)

    async with trio.open_nursery() as nursery:
        for i, call in enumerate(calls):
            nursery.start_soon(one, i, *call)
    return answers


async def test_24_submits_across_two_gateways_against_a_balance_for_10_hold_10(
        nursery: trio.Nursery, tmp_path: Path, postgres_url: str) -> None:
    a, b = await two(nursery, tmp_path, postgres_url)
    status, _ = await a.call("POST", "/v1/ledger/accounts/t1/credit", "admin",
                             json={"amount": 100, "ref": "pay-1"})
    assert status == 200
    answers = await together(*(
        ((a, b)[i % 2], "POST", "/v1/tasks", "t1",
         {"task_id": f"h{i}", "site": "shop", "account": f"acct{i}", "kind": "k",
          "max_cost": 10}) for i in range(24)))
    assert sorted(status for status, _ in answers) == [201] * 10 + [402] * 14, answers
    for gw in (a, b):
        status, audit = await gw.call("GET", "/v1/ledger/audit", "admin")
        assert status == 200 and audit["ok"] is True, audit
        status, account = await gw.call("GET", "/v1/ledger/accounts/t1", "admin")
        assert (account["balance"], account["held"], account["available"]) == (100, 100, 0)


async def test_identical_submits_on_two_gateways_create_one_job(
        nursery: trio.Nursery, tmp_path: Path, postgres_url: str) -> None:
    a, b = await two(nursery, tmp_path, postgres_url)
    for i in range(10):
        body = {"task_id": f"same-{i}", "site": "shop", "kind": "k", "params": {"n": i}}
        answers = await together((a, "POST", "/v1/tasks", "t1", body),
                                 (b, "POST", "/v1/tasks", "t1", body))
        assert sorted((s, r["created"]) for s, r in answers) == [(200, False), (201, True)]
        other = {**body, "params": {"n": -1}}  # the same id, another payload: 6004
        answers = await together((a, "POST", "/v1/tasks", "t1", other),
                                 (b, "POST", "/v1/tasks", "t1", other))
        assert [(s, r["error"]["code"]) for s, r in answers] == [(409, 6004)] * 2


async def test_concurrent_leases_on_two_gateways_keep_one_task_per_lane_in_flight(
        nursery: trio.Nursery, tmp_path: Path, postgres_url: str) -> None:
    a, b = await two(nursery, tmp_path, postgres_url)
    for lane in range(3):
        for n in range(4):
            status, _ = await a.call("POST", "/v1/tasks", "t1", json={
                "task_id": f"l{lane}-{n}", "site": "shop", "account": f"lane{lane}",
                "kind": "k"})
            assert status == 201
    leased: list[Json] = []
    for _ in range(5):
        answers = await together(*(
            (gw, "POST", "/v1/tasks/lease", "worker",
             {"worker_id": f"w{i}", "wait_seconds": 0, "max": 10})
            for i, gw in enumerate((a, b, a, b))))
        batch = [item for status, reply in answers for item in reply["items"]]
        assert all(status == 200 for status, _ in answers)
        leased += batch
        accounts = [item["account"] for item in leased]
        assert len(accounts) == len(set(accounts)), accounts  # one per lane in flight
    assert sorted(item["account"] for item in leased) == ["lane0", "lane1", "lane2"]


async def test_gateways_starting_together_on_a_fresh_database_print_one_set_of_keys(
        nursery: trio.Nursery, tmp_path: Path, postgres_url: str) -> None:
    base = load(environ={}, overrides={"database_url": postgres_url,
                                       "unsafe_durability": True})
    systems = [new_system(tmp_path / "leasegate.db", base.replace(gateway=name),
                          clock=Clock()) for name in ("a", "b")]
    outs = [io.StringIO(), io.StringIO()]
    async with trio.open_nursery() as starting:
        for system, out in zip(systems, outs, strict=True):
            async def start(system: System = system, out: io.StringIO = out) -> None:
                await nursery.start(system.run)
                await bootstrap_keys(system, out)
            starting.start_soon(start)
    printed = [out.getvalue() for out in outs]
    assert sorted(text.count("lg_") for text in printed) == [0, 3], printed
    for system in systems:
        system.close()


async def test_a_throttle_holds_for_both_channels_leased_at_once_on_two_gateways(
        nursery: trio.Nursery, tmp_path: Path, postgres_url: str) -> None:
    a, b = await two(nursery, tmp_path, postgres_url)
    for n in range(40):
        for gw, channel, job in ((a, "tasks", {"task_id": f"t{n}", "account": f"a{n}"}),
                                 (b, "queries", {"query_id": f"q{n}"})):
            status, _ = await gw.call("POST", f"/v1/{channel}", "t1", json={
                **job, "site": "slow", "kind": "k", "params": {}})
            assert status == 201
    for gw in (a, b):  # B told too, not left to its reload: the rate as it stands keeps
        status, _ = await gw.call("PUT", "/v1/sites/slow/throttle", "admin",  # the bucket
                                  json={"leases_per_second": 4})
        assert status == 200
    got: list[tuple[str, str]] = []
    start = trio.current_time()

    async def worker(gw: Gateway, name: str, channel: str) -> None:
        while trio.current_time() < start + 3.0:
            status, reply = await gw.call("POST", f"/v1/{channel}/lease", "worker", json={
                "worker_id": f"{name}-{channel}", "wait_seconds": 1, "max": 10})
            assert status == 200, reply  # no turn failed (a deadlock would be a 503)
            got.extend((name, channel) for _ in reply["items"])

    async with trio.open_nursery() as workers:
        for gw, name in ((a, "a"), (b, "b")):
            for channel in ("tasks", "queries", "tasks", "queries"):
                workers.start_soon(worker, gw, name, channel)
    elapsed = trio.current_time() - start
    # One bucket among eight workers, two channels, two gateways: one at once, then 4 a
    # second (four buckets, one per gateway and channel, would give four times that).
    assert 4 * 3.0 - 2 <= len(got) <= 1 + 4 * elapsed, (len(got), elapsed, got)
    assert {channel for _, channel in got} == {"tasks", "queries"}, got  # both get some
