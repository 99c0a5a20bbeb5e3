"""The ledger's bounds: no balance, and no sum of balances, can leave 64-bit integers.

``ledger_max_amount`` bounds one credit or ``max_cost``; ``ledger_max_balance``
bounds the money ever credited (``@world``'s balance is minus all of it), and so
every account and every sum of them. Past either: 422 (6010) and nothing moves.
A database written before the bounds (balances SQLite turned into REALs, a
journal whose sums overflow) still starts and says what is wrong.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import trio
import trio.testing

from leasegate.actors.ledger.holds import PlaceHold, ReleaseHold
from leasegate.clock import Clock
from leasegate.http.app import create_app
from leasegate.settings import MAX_AMOUNT, MAX_BALANCE, Settings
from leasegate.storage.datadir import db_path
from leasegate.system import new_system
from tests import served
from tests.conftest import EPOCH, Gateway, start_gateway
from tests.test_cli import run_cli
from tests.test_http_tasks import ORDER, assert_error, call
from tests.test_ledger import QUERY, account, audit_ok, credit, start_up_refusal

Json = dict[str, Any]


async def credit_status(gw: Gateway, amount: int, ref: str, to: str = "t1") -> tuple[int, Json]:
    return await call(gw, "POST", f"/v1/ledger/accounts/{to}/credit", "admin",
                      {"amount": amount, "ref": ref})


async def the_repro(gw: Gateway, most: int) -> None:
    """The issue's repro: 1,024 credits of 2**53, each answered 200 then; now the first
    that would take the money ever credited past ``most`` is refused, and every one after
    it, with nothing moved."""
    accepted = 0
    for i in range(1024):
        status, body = await credit_status(gw, 2**53, f"o{i}", to="t")
        if (accepted + 1) * 2**53 <= most:
            assert status == 200, body
            accepted += 1
        else:
            assert_error(status, body, 422, 6010)
            assert "ledger_max_balance" in body["error"]["message"]
    assert accepted == most // 2**53
    assert (await account(gw, "t"))["balance"] == accepted * 2**53
    assert (await account(gw, "@world"))["balance"] == -accepted * 2**53
    assert await audit_ok(gw)


async def test_the_issues_repro_is_refused_at_the_bound_and_restarts_clean(
        tmp_path: Path, settings: Settings, clock: Clock) -> None:
    path = tmp_path / "leasegate.db"
    for most in (settings.ledger_max_balance, MAX_BALANCE):  # the default; the ceiling
        path.unlink(missing_ok=True)
        limits = settings.replace(rate_limit_per_second=0, ledger_max_balance=most)
        async with trio.open_nursery() as nursery:
            gateway = await start_gateway(nursery, path, limits, clock)
            await the_repro(gateway, most)
            gateway.system.close()
        async with trio.open_nursery() as nursery:  # restart: the start-up audit passes
            again = await start_gateway(nursery, path, limits, clock)
            assert await audit_ok(again)
            status, health = await call(again, "GET", "/health")
            assert (status, health["checks"]["ledger_ok"]) == (200, True)
            assert (await account(again, "t"))["available"] == most // 2**53 * 2**53
            again.system.close()


async def test_one_amount_past_ledger_max_amount_is_422_and_nothing_moves(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    limits = settings.replace(ledger_max_amount=1000, ledger_max_balance=2500)
    gw = await start_gateway(nursery, tmp_path / "leasegate.db", limits, clock)
    assert_error(*await credit_status(gw, 1001, "too-much"), 422, 6010)
    await credit(gw, "t1", 1000, "p1")
    await credit(gw, "t2", 1000, "p2")
    status, body = await credit_status(gw, 501, "p3")  # 2501 ever credited: past 2500
    assert_error(status, body, 422, 6010)
    await credit(gw, "t1", 500, "p4")  # exactly at the bound
    assert_error(*await credit_status(gw, 1, "p5", to="t2"), 422, 6010)
    assert await credit(gw, "t1", 500, "p4")  # a replay still answers; nothing moves

    for path, body in (("/v1/tasks", {**ORDER, "task_id": "dear"}),
                       ("/v1/queries", {**QUERY, "query_id": "dear-q"})):
        assert_error(*await call(gw, "POST", path, "t1", {**body, "max_cost": 1001}),
                     422, 6010)
    for path in ("/v1/tasks/dear", "/v1/queries/dear-q"):
        assert (await call(gw, "GET", path, "t1"))[0] == 404  # nothing enqueued
    status, reply = await call(gw, "POST", "/v1/tasks/batch", "t1", {"items": [
        {**ORDER, "account": "a", "max_cost": 1000}, {**ORDER, "account": "b",
                                                       "max_cost": 1001},
        {**ORDER, "account": "c", "max_cost": 0}]})
    assert status == 200
    assert [item["status"] for item in reply["items"]] == [201, 422, 201]
    assert reply["items"][1]["error"]["code"] == 6010
    assert (await account(gw))["held"] == 1000
    # Past the schema's maximum (2**53) it is the edge's 400.
    assert_error(*await credit_status(gw, MAX_AMOUNT + 1, "p6"), 400, 4000)
    assert_error(*await call(gw, "POST", "/v1/tasks", "t1",
                             {**ORDER, "max_cost": MAX_AMOUNT + 1}), 400, 4000)
    assert (await account(gw, "@world"))["balance"] == -2500
    assert await audit_ok(gw)


async def test_a_cost_past_the_hold_is_charged_the_hold(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    """A worker's ``cost`` is never an entry of its own: the charge is capped at the
    hold, so the largest cost the schema takes moves no more than ``max_cost``."""
    gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)
    await credit(gw, "t1", 100, "p1")
    status, _ = await call(gw, "POST", "/v1/tasks", "t1", {**ORDER, "task_id": "j",
                                                           "max_cost": 40})
    assert status == 201
    status, leased = await call(gw, "POST", "/v1/tasks/lease", "worker",
                                {"worker_id": "w1", "wait_seconds": 0})
    token = leased["items"][0]["lease_token"]
    fenced = {"worker_id": "w1", "lease_token": token}
    assert (await call(gw, "POST", "/v1/tasks/j/start", "worker", fenced))[0] == 200
    status, done = await call(gw, "POST", "/v1/tasks/j/result", "worker", {
        **fenced, "outcome": "succeeded", "cost": MAX_AMOUNT})
    assert status == 200, done
    await trio.testing.wait_all_tasks_blocked()  # the settle follows the task's commit
    assert (await account(gw))["balance"] == 60
    assert (await account(gw, "@revenue"))["balance"] == 40


async def test_the_audit_sums_a_journal_whose_lines_add_up_past_int64(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    """The same 2**53 held and released 1,025 times: ``@holds``' journal has more than
    2**63 on its positive lines alone. Summed in its own order every partial sum is a
    balance it once had, so the audit passes."""
    gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)
    await credit(gw, "t1", 2**53, "all")
    ledger = gw.system.ledger
    for _ in range(1025):
        assert (await ledger.ask(PlaceHold("task", "again", "t1", 2**53))).created
        assert await ledger.ask(ReleaseHold("task", "again"))
    assert await audit_ok(gw)


# ---- a database written before the bounds -----------------------------------------

def write_old_overflow(path: Path, credits: int = 1030) -> None:
    """What ``credits`` credits of 2**53 left in a database before the bounds: the
    statements the ledger ran then (SQLite turned the overflowing balances into REALs)."""
    with sqlite3.connect(path) as conn:
        for i in range(credits):
            txn_id = conn.execute("INSERT INTO ledger_txns (kind, ref, created_at) "
                                  "VALUES ('credit', ?, 0)", (f"o{i}",)).lastrowid
            for name, amount in (("@world", -(2**53)), ("t", 2**53)):
                conn.execute("INSERT INTO ledger_lines (txn_id, account, amount) "
                             "VALUES (?, ?, ?)", (txn_id, name, amount))
                conn.execute("INSERT INTO ledger_accounts (account, balance, created_at) "
                             "VALUES (?, ?, 0) ON CONFLICT (account) "
                             "DO UPDATE SET balance = balance + excluded.balance",
                             (name, amount))
            conn.execute("INSERT INTO ledger_credits (ref, account, amount, txn_id, "
                         "created_at) VALUES (?, 't', ?, ?, 0)", (f"o{i}", 2**53, txn_id))
        assert conn.execute("SELECT typeof(balance) FROM ledger_accounts "
                            "WHERE account = 't'").fetchone() == ("real",)


def failing(audit: Json) -> dict[str, str]:
    return {check["name"]: check["detail"] for check in audit["checks"] if not check["ok"]}


async def test_books_that_overflowed_before_the_bounds_start_and_say_what_is_wrong(
        tmp_path: Path, settings: Settings, clock: Clock) -> None:
    path = tmp_path / "leasegate.db"
    async with trio.open_nursery() as nursery:  # a database of this version, then the rows
        (await start_gateway(nursery, path, settings, clock)).system.close()
    write_old_overflow(path)

    assert "amounts_are_int64" in await start_up_refusal(path, settings)

    allowed = new_system(path, settings, clock=Clock(EPOCH), inline_storage=True,
                         allow_unbalanced=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(allowed.run)
        gw = Gateway(allowed, create_app(allowed))
        gw.keys = {"admin": await admin_key(allowed)}
        status, audit = await call(gw, "GET", "/v1/ledger/audit", "admin")
        assert (status, audit["ok"]) == (200, False)
        found = failing(audit)
        assert "reals" in found["amounts_are_int64"], found
        assert "past 64-bit integers" in found["balances_match_journal"], found
        status, health = await call(gw, "GET", "/health")
        assert (health["status"], health["checks"]["ledger_ok"]) == ("degraded", False)
        # No more money comes in; what is there can still be read.
        assert_error(*await credit_status(gw, 1, "more", to="t2"), 422, 6010)
        assert (await account(gw, "t"))["available"] > 2**63 - 2**60
        allowed.close()


async def admin_key(system: Any) -> str:
    from leasegate.actors.keys.records import CreateKey

    return str((await system.keys.ask(CreateKey("admin", "operator", None))).key)


def test_serve_on_overflowed_books_names_the_check_and_serves_when_allowed(
        tmp_path: Path) -> None:
    data = tmp_path / "var"
    gateway = served.start(data)
    assert served.stop(gateway) == 0
    write_old_overflow(db_path(data))
    run = run_cli("serve", "--data", str(data), "--port", str(served.free_port()))
    assert run.returncode == 1
    [line] = run.stderr.splitlines()  # one line, no traceback
    assert line.startswith("leasegate: the ledger audit failed") and \
        "amounts_are_int64" in line, line
    again = served.start(data, keys=gateway.keys, extra_args=("--allow-unbalanced",))
    try:
        with again.client("admin") as admin:
            audit = admin.get("/v1/ledger/audit")
            assert (audit.status_code, audit.json()["ok"]) == (200, False)
            assert admin.get("/health").json()["checks"]["ledger_ok"] is False
    finally:
        assert served.stop(again) == 0
