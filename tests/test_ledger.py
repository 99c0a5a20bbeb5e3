"""The ledger over HTTP: credits, holds at submit, settlement, recovery, retention, audit.

Every rule of the ledger as a user sees it (accounts, entries, holds, the jobs'
``billing``). Time is virtual (autojump): recovery runs every 60 s, orphans
are refunded past 5 h, tasks go stale when their 120 s lease lapses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.actors.ledger.audit import LedgerUnbalanced
from leasegate.actors.ledger.holds import PlaceHold, Settle
from leasegate.client import Client, HandlerResult, IdempotencyConflict, Job, NotFound, Worker
from leasegate.clock import Clock
from leasegate.http.app import create_app
from leasegate.settings import Settings
from leasegate.system import new_system
from tests.conftest import EPOCH, Gateway, open_db, start_gateway
from tests.served import Served
from tests.test_http_tasks import ORDER, assert_error, call, finish, running, submit

pytestmark = pytest.mark.both_engines  # the behavioural suite: SQLite and PostgreSQL

Json = dict[str, Any]


@pytest.fixture(autouse=True)
def no_fallback_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """One gateway per database here: its own commits tell its event hub to read the
    events table (PostgreSQL), and no other gateway's notice can be lost, so the hub's
    fallback read every 2 s only ticks, some 10,000 times in a test's virtual hours."""
    monkeypatch.setattr("leasegate.actors.event_stream.TAIL_FALLBACK_SECONDS", 3600.0)


# A test that lets virtual hours pass and purges nothing: the housekeeping jobs (purges of
# old tasks, queries, settled holds, devices' presence, every 60 s) would only tick, each
# a turn and its commit, some 1,500 in six hours.
no_housekeeping = pytest.mark.no_housekeeping


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    if request.node.get_closest_marker("no_housekeeping") is not None:
        return settings.replace(housekeeping_interval=24 * 3600)
    return settings


QUERY: Json = {"site": "shop", "kind": "balance", "params": {}}


async def credit(gw: Gateway, account: str, amount: int, ref: str) -> Json:
    status, body = await call(gw, "POST", f"/v1/ledger/accounts/{account}/credit", "admin",
                              {"amount": amount, "ref": ref})
    assert status == 200, body
    return body


async def account(gw: Gateway, name: str = "t1", who: str = "admin") -> Json:
    status, body = await call(gw, "GET", f"/v1/ledger/accounts/{name}", who)
    assert status == 200, body
    return body


async def holds(gw: Gateway, **args: str) -> list[Json]:
    query = "&".join(f"{k}={v}" for k, v in args.items())
    status, body = await call(gw, "GET", f"/v1/ledger/holds?{query}", "admin")
    assert status == 200, body
    items: list[Json] = body["items"]
    return items


async def audit_ok(gw: Gateway) -> bool:
    status, body = await call(gw, "GET", "/v1/ledger/audit", "admin")
    assert status == 200, body
    return bool(body["ok"])


def money(view: Json) -> tuple[int, int, int]:
    return view["available"], view["held"], view["balance"]


# ---- credits -----------------------------------------------------------------------

async def test_credit_is_idempotent_by_ref_and_another_amount_is_6004(gateway: Gateway) -> None:
    assert money(await credit(gateway, "t1", 100, "pay-1")) == (100, 0, 100)
    assert money(await credit(gateway, "t1", 100, "pay-1")) == (100, 0, 100)  # a retry
    status, body = await call(gateway, "POST", "/v1/ledger/accounts/t1/credit", "admin",
                              {"amount": 50, "ref": "pay-1"})
    assert_error(status, body, 409, 6004)
    status, body = await call(gateway, "POST", "/v1/ledger/accounts/@holds/credit", "admin",
                              {"amount": 5, "ref": "pay-2"})
    assert_error(status, body, 400, 4000)
    status, body = await call(gateway, "POST", "/v1/ledger/accounts/t1/credit", "t1",
                              {"amount": 5, "ref": "pay-3"})
    assert_error(status, body, 403, 4030)
    status, body = await call(gateway, "GET", "/v1/ledger/accounts/t1/entries", "t1")
    assert status == 200
    assert [(e["kind"], e["amount"], e["ref"]) for e in body["items"]] == [
        ("credit", 100, "pay-1")]
    assert money(await account(gateway, "@world")) == (-100, 0, -100)
    assert await audit_ok(gateway)


async def test_client_reads_only_its_own_account(gateway: Gateway) -> None:
    await credit(gateway, "t2", 7, "p")
    assert money(await account(gateway, "t1", who="t1")) == (0, 0, 0)
    for path in ("/v1/ledger/accounts/t2", "/v1/ledger/accounts/t2/entries",
                 "/v1/ledger/accounts/@world"):
        status, body = await call(gateway, "GET", path, "t1")
        assert_error(status, body, 404, 4040)
    for path, who in (("/v1/ledger/accounts/t1", "worker"), ("/v1/ledger/holds", "t1"),
                      ("/v1/ledger/audit", "t1")):
        status, body = await call(gateway, "GET", path, who)
        assert_error(status, body, 403, 4030)
    assert money(await account(gateway, "t2", who="t2")) == (7, 0, 7)


# ---- holds at submit ---------------------------------------------------------------

async def test_short_funds_are_402_and_nothing_is_enqueued(gateway: Gateway) -> None:
    await credit(gateway, "t1", 10, "p")
    status, body = await call(gateway, "POST", "/v1/tasks", "t1",
                              {**ORDER, "task_id": "big", "max_cost": 11})
    assert_error(status, body, 402, 6007)
    status, body = await call(gateway, "POST", "/v1/queries", "t1", {**QUERY, "max_cost": 11})
    assert_error(status, body, 402, 6007)
    for path in ("/v1/tasks", "/v1/queries"):
        status, body = await call(gateway, "GET", path, "admin")
        assert body["total"] == 0
    status, body = await call(gateway, "GET", "/v1/tasks/big", "t1")
    assert_error(status, body, 404, 6001)
    assert money(await account(gateway)) == (10, 0, 10)
    await submit(gateway, task_id="fits", max_cost=10)
    assert money(await account(gateway)) == (0, 10, 10)


async def test_a_replay_holds_once_and_a_refused_submit_releases_its_hold(
        gateway: Gateway) -> None:
    await credit(gateway, "t1", 100, "p")
    await submit(gateway, task_id="x", max_cost=40)
    status, body = await call(gateway, "POST", "/v1/tasks", "t1",
                              {**ORDER, "task_id": "x", "max_cost": 40})
    assert (status, body["created"]) == (200, False)
    assert money(await account(gateway)) == (60, 40, 100)
    # Another payload under x: 6004, and the hold of the existing x is kept.
    status, body = await call(gateway, "POST", "/v1/tasks", "t1",
                              {**ORDER, "task_id": "x", "max_cost": 40, "priority": 5})
    assert_error(status, body, 409, 6004)
    assert money(await account(gateway)) == (60, 40, 100)
    # y exists without max_cost: a submit of y with one holds, is refused, and releases.
    await submit(gateway, task_id="y")
    status, body = await call(gateway, "POST", "/v1/tasks", "t1",
                              {**ORDER, "task_id": "y", "max_cost": 30})
    assert_error(status, body, 409, 6004)
    assert money(await account(gateway)) == (60, 40, 100)
    status, body = await call(gateway, "GET", "/v1/ledger/accounts/t1/entries", "t1")
    assert [(e["kind"], e["amount"], e["ref"]) for e in body["items"]] == [
        ("refund", 30, "y"), ("hold", -30, "y"), ("hold", -40, "x"), ("credit", 100, "p")]
    assert [h["ref"] for h in await holds(gateway)] == ["x"]
    assert await audit_ok(gateway)


# ---- settlement --------------------------------------------------------------------

@pytest.mark.parametrize(("outcome", "extra", "charged"), [
    ("succeeded", {}, 100),                 # no cost reported: the full hold
    ("succeeded", {"cost": 30}, 30),
    ("succeeded", {"cost": 500}, 100),      # capped at the hold
    ("failed", {}, 0),
    ("failed", {"cost": 20}, 20),           # what was delivered
    ("canceled", {"cost": 5}, 5),
])
async def test_settle_charges_by_outcome_and_refunds_the_rest(
        gateway: Gateway, outcome: str, extra: Json, charged: int) -> None:
    await credit(gateway, "t1", 250, "p")
    item = await running(gateway, "t", max_cost=100)
    assert money(await account(gateway)) == (150, 100, 250)
    done = await finish(gateway, item, outcome, **extra)
    assert done["billing"] == {"max_cost": 100, "charged": charged, "refunded": 100 - charged,
                               "hold_status": "settled"}
    assert money(await account(gateway)) == (250 - charged, 0, 250 - charged)
    assert money(await account(gateway, "@revenue")) == (charged, 0, charged)
    # A second settle (a duplicate notice) changes nothing.
    await gateway.system.ledger.tell(Settle("task", "t", "succeeded", 100))
    assert money(await account(gateway)) == (250 - charged, 0, 250 - charged)
    status, body = await call(gateway, "GET", "/v1/tasks?limit=5", "t1")
    assert status == 200
    assert body["items"][0]["billing"]["charged"] == charged
    assert await audit_ok(gateway)


async def test_cancel_and_expiry_refund_in_full_on_both_channels(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings,
        autojump_clock: trio.testing.MockClock) -> None:
    gateway = await start_gateway(nursery, tmp_path / "leasegate.db",
                                  settings.replace(task_ttl=900), Clock(EPOCH))
    await credit(gateway, "t1", 100, "p")
    await submit(gateway, task_id="c", max_cost=10)
    status, body = await call(gateway, "POST", "/v1/tasks/c/cancel", "t1")
    assert body["billing"] == {"max_cost": 10, "charged": 0, "refunded": 10,
                               "hold_status": "settled"}
    status, q = await call(gateway, "POST", "/v1/queries", "t1", {**QUERY, "max_cost": 20})
    assert status == 201
    await submit(gateway, task_id="e", max_cost=30)
    assert money(await account(gateway)) == (50, 50, 100)
    await trio.sleep(905)  # past query_ttl and task_ttl: both expire unleased
    assert money(await account(gateway)) == (100, 0, 100)
    status, body = await call(gateway, "GET", f"/v1/queries/{q['query_id']}", "t1")
    assert (body["status"], body["billing"]["refunded"]) == ("expired", 20)


async def test_a_query_is_charged_its_reported_cost(gateway: Gateway) -> None:
    await credit(gateway, "t1", 100, "p")
    status, body = await call(gateway, "POST", "/v1/queries", "t1",
                              {**QUERY, "query_id": "q1", "max_cost": 9})
    assert (status, body["created"]) == (201, True)
    status, leased = await call(gateway, "POST", "/v1/queries/lease", "worker",
                                {"worker_id": "w1", "wait_seconds": 0})
    token = leased["items"][0]["lease_token"]
    status, done = await call(gateway, "POST", "/v1/queries/q1/result", "worker",
                              {"worker_id": "w1", "lease_token": token,
                               "outcome": "succeeded", "cost": 3})
    assert status == 200, done
    assert done["billing"] == {"max_cost": 9, "charged": 3, "refunded": 6,
                               "hold_status": "settled"}
    assert money(await account(gateway)) == (97, 0, 97)


# ---- stale tasks and recovery --------------------------------------------------------

@no_housekeeping
async def test_a_stale_hold_stays_open_until_reclaimed(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await credit(gateway, "t1", 100, "p")
    await running(gateway, "s", max_cost=100)
    await trio.sleep(6 * 3600)  # stale after 120 s; recovery ran for hours, past orphan age
    status, task = await call(gateway, "GET", "/v1/tasks/s", "t1")
    assert task["status"] == "stale"
    assert task["billing"]["hold_status"] == "open"
    assert money(await account(gateway)) == (0, 100, 100)
    status, done = await call(gateway, "POST", "/v1/tasks/s/reclaim", "admin",
                              {"action": "succeeded", "reason": "the order is on the site",
                               "cost": 70})
    assert status == 200, done
    assert done["billing"]["charged"] == 70
    assert money(await account(gateway)) == (30, 0, 30)


async def test_recovery_settles_a_lost_settle_and_a_late_settle_changes_nothing(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await credit(gateway, "t1", 100, "p")
    item = await running(gateway, "lost", max_cost=50)
    ledger = gateway.system.ledger
    gateway.system.task_actor.turn.settle.ledger = None  # the notice is lost (a crash after commit)
    await finish(gateway, item, "succeeded", cost=20)
    gateway.system.task_actor.turn.settle.ledger = ledger
    assert [h["status"] for h in await holds(gateway)] == ["open"]
    await trio.sleep(61)  # recovery
    assert [(h["status"], h["charged"]) for h in await holds(gateway)] == [("settled", 20)]
    # The notice arrives after all (recovery won): nothing changes.
    await ledger.tell(Settle("task", "lost", "succeeded", 50))
    assert money(await account(gateway)) == (80, 0, 80)
    # The other order: the notice settles first, recovery then finds nothing to do.
    item = await running(gateway, "kept", account="acct-2", max_cost=10)
    await finish(gateway, item, "failed")
    await trio.sleep(61)
    assert money(await account(gateway)) == (80, 0, 80)
    status, body = await call(gateway, "GET", "/v1/ledger/accounts/t1/entries", "t1")
    assert status == 200
    assert [(e["kind"], e["amount"], e["ref"]) for e in body["items"]] == [
        ("refund", 10, "kept"), ("hold", -10, "kept"), ("refund", 30, "lost"),
        ("hold", -50, "lost"), ("credit", 100, "p")]
    assert await audit_ok(gateway)


@no_housekeeping
async def test_recovery_refunds_an_orphan_hold_past_max_age_and_never_a_live_job(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await credit(gateway, "t1", 100, "p")
    # A hold whose submit never arrived (the process died between the two).
    await gateway.system.ledger.ask(PlaceHold("task", "ghost", "t1", 10))
    await running(gateway, "stale", account="acct-s", max_cost=30)
    await submit(gateway, task_id="live", account="acct-q", max_cost=20)  # stays queued
    await trio.sleep(4 * 3600)
    assert money(await account(gateway)) == (40, 60, 100)
    await trio.sleep(3600 + 120)  # past ledger_orphan_max_age (5 h)
    assert money(await account(gateway)) == (50, 50, 100)
    assert {h["ref"]: h["status"] for h in await holds(gateway)} == {
        "ghost": "settled", "live": "open", "stale": "open"}


async def crash_with_an_orphan_hold(path: Path, settings: Settings, clock: Clock) -> None:
    """A gateway that placed the hold of "cut-short" and died before its job, then six
    hours down (longer than ``ledger_orphan_max_age``)."""
    async with trio.open_nursery() as first:
        gw = await start_gateway(first, path, settings, clock)
        await credit(gw, "t1", 100, "p")
        await gw.system.ledger.ask(PlaceHold("task", "cut-short", "t1", 10))
        gw.system.close()
    await trio.sleep(6 * 3600)


@no_housekeeping
async def test_an_orphan_hold_left_by_a_crash_waits_its_max_age_after_the_restart(
        tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    """A caller cannot retry while the gateway is down: a hold a crash left without its
    job is refunded only once the restarted gateway has served ``ledger_orphan_max_age``,
    so a retry right after a long outage still creates the job on that hold."""
    path = tmp_path / "lg.db"
    await crash_with_an_orphan_hold(path, settings, clock)
    async with trio.open_nursery() as second:
        gw = await start_gateway(second, path, settings, clock)
        await trio.sleep(4 * 3600)
        assert {h["ref"]: h["status"] for h in await holds(gw)} == {"cut-short": "open"}
        await trio.sleep(3600 + 120)  # the restarted gateway has served 5 h: refunded
        assert {h["ref"]: h["status"] for h in await holds(gw)} == {"cut-short": "settled"}
        assert money(await account(gw)) == (100, 0, 100)
        gw.system.close()


async def test_a_retry_after_a_long_outage_creates_the_job_on_its_hold(
        tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    path = tmp_path / "lg.db"
    await crash_with_an_orphan_hold(path, settings, clock)
    async with trio.open_nursery() as second:
        gw = await start_gateway(second, path, settings, clock)
        await trio.sleep(120)  # recovery has run since the restart
        status, body = await call(gw, "POST", "/v1/tasks", "t1",
                                  {**ORDER, "task_id": "cut-short", "max_cost": 10})
        assert (status, body["created"]) == (201, True)
        assert money(await account(gw)) == (90, 10, 100)
        assert await audit_ok(gw)
        gw.system.close()


# ---- retention ---------------------------------------------------------------------

async def test_a_settled_job_id_is_never_held_again_after_retention(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings,
        autojump_clock: trio.testing.MockClock) -> None:
    gateway = await start_gateway(nursery, tmp_path / "leasegate.db",
                                  settings.replace(ledger_settled_retention=3600),
                                  Clock(EPOCH))
    await credit(gateway, "t1", 100, "p")
    item = await running(gateway, "once", max_cost=40)
    await finish(gateway, item, "succeeded", cost=15)
    await trio.sleep(2 * 3600)
    assert await holds(gateway) == []  # the hold row is gone, the journal stays
    placed = await gateway.system.ledger.ask(PlaceHold("task", "once", "t1", 40))
    assert (placed.status, placed.created) == ("settled", False)
    await gateway.system.ledger.tell(Settle("task", "once", "failed"))
    status, body = await call(gateway, "POST", "/v1/tasks", "t1",
                              {**ORDER, "task_id": "once", "max_cost": 40})
    assert (status, body["created"]) == (200, False)
    assert money(await account(gateway)) == (85, 0, 85)
    assert await audit_ok(gateway)


# ---- audit ---------------------------------------------------------------------------

async def start_up_refusal(path: Path, settings: Settings) -> str:
    """Why a system on ``path`` refuses to start (its start-up audit failed)."""
    refused = None
    try:
        async with trio.open_nursery() as n:
            await n.start(new_system(path, settings, clock=Clock(EPOCH),
                                     inline_storage=True).run)
    except* LedgerUnbalanced as group:
        refused = str(group.exceptions[0])
    assert refused is not None, "the system started"
    return refused


async def test_audit_detects_a_tampered_balance_and_start_up_refuses(
        gateway: Gateway, tmp_path: Path, settings: Settings) -> None:
    await credit(gateway, "t1", 100, "p")
    await submit(gateway, task_id="h", max_cost=10)
    assert await audit_ok(gateway)
    path = tmp_path / "leasegate.db"
    tamper = open_db(path, database_url=settings.database_url)
    tamper.run_sync(lambda conn: conn.execute(
        "UPDATE ledger_accounts SET balance = balance + 5 WHERE account = 't1'"))
    tamper.close()
    status, body = await call(gateway, "GET", "/v1/ledger/audit", "admin")
    assert body["ok"] is False
    failing = {c["name"] for c in body["checks"] if not c["ok"]}
    assert failing == {"balances_sum_to_zero", "balances_match_journal"}
    status, health = await call(gateway, "GET", "/health")
    assert status == 200
    assert (health["status"], health["checks"]["ledger_ok"]) == ("degraded", False)

    assert "balances_match_journal" in await start_up_refusal(path, settings)

    allowed = new_system(path, settings, clock=Clock(EPOCH), inline_storage=True,
                         allow_unbalanced=True)
    async with trio.open_nursery() as n:
        await n.start(allowed.run)
        response = await create_app(allowed).test_client().get("/health")
        assert (await response.get_json())["checks"]["ledger_ok"] is False
        allowed.close()
    response = await gateway.client.get("/metrics", headers=gateway.auth("admin"))
    assert "leasegate_ledger_audit_ok 0.0" in (await response.get_data()).decode()


async def test_the_start_up_audit_is_a_run_of_the_audit_job(gateway: Gateway) -> None:
    status, health = await call(gateway, "GET", "/health", "admin")
    assert status == 200
    audit = health["details"]["jobs"]["ledger.audit"]
    assert (audit["runs"], audit["last_run_at"]) == (1, "2026-11-30T08:00:00Z")


# ---- the SDK -------------------------------------------------------------------------

def test_the_sdk_credits_reads_the_account_and_its_entries(served: Served) -> None:
    def place_order(job: Job) -> HandlerResult:
        job.cost = 4
        return {"order_no": "A1"}

    with Client(served.url, served.keys["admin"]) as admin, \
            Client(served.url, served.keys["client"]) as client, \
            Worker(served.url, served.keys["worker"], "desk-1", wait_seconds=2) as worker:
        assert admin.credit("default", 50, "invoice-1", memo="first") == {
            "account": "default", "available": 50, "held": 0, "balance": 50}
        assert admin.credit("default", 50, "invoice-1")["available"] == 50  # once per ref
        with pytest.raises(IdempotencyConflict):
            admin.credit("default", 60, "invoice-1")
        submitted = client.submit_task("shop", "place_order", {}, max_cost=10)
        assert client.account("default")["held"] == 10
        assert worker.run_once(place_order) == 1
        done = client.wait_task(submitted["task_id"], timeout=10)
        assert done["billing"] == {"max_cost": 10, "charged": 4, "refunded": 6,
                                   "hold_status": "settled"}
        assert client.account("default") == {"account": "default", "available": 46,
                                              "held": 0, "balance": 46}
        entries = client.entries("default", limit=10)
        assert [(e["kind"], e["amount"]) for e in entries["items"]] == [
            ("refund", 6), ("hold", -10), ("credit", 50)]
        with pytest.raises(NotFound):
            client.account("someone-else")
