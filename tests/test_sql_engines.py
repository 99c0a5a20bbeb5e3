"""One SQL for both engines: the storage modules' functions, unchanged, give the same
answers on SQLite and on PostgreSQL (through its adapter). Each test runs on both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leasegate.storage import (
    devices_sql,
    events_sql,
    keys_sql,
    ledger_sql,
    presence_sql,
    queries_sql,
    tasks_sql,
)
from leasegate.storage.connection import begin, commit, transaction
from leasegate.storage.database import migrate, open_database
from leasegate.storage.engine import Connection
from leasegate.storage.pages import page_rows
from leasegate.storage.probe import probe_write

NOW = 1_000.0


@pytest.fixture(params=["sqlite", "postgresql"])
def conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connection]:
    """A migrated database of each engine; the connection, used inline."""
    url = None if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    db = open_database(url, tmp_path, synchronous="OFF", inline=True)
    db.run_sync(migrate)
    yield db.run_sync(lambda c: c)
    db.close()


def submit(conn: Connection, task_id: str, *, site: str = "s", account: str = "a",
           priority: int = 0, at: float = NOW, **more: Any) -> bool:
    return tasks_sql.JOBS.insert_many(conn, [dict(
        task_id=task_id, tenant="ten", site=site, account=account, kind="k", params="{}",
        priority=priority, fingerprint=f"fp-{task_id}", status="queued", created_at=at,
        updated_at=at, expires_at=at + 3600, **more)]) == 1


def leasable(conn: Connection, sites: list[str] | None = None, limit: int = 10) -> list[str]:
    return [row["task_id"] for row in tasks_sql.next_queued(conn, sites, NOW, limit)]


def test_a_task_goes_from_submit_to_result_through_its_lane(conn: Connection) -> None:
    with transaction(conn):
        assert submit(conn, "t1") and submit(conn, "t2", priority=5)
        assert submit(conn, "t3", account="b")
        assert not submit(conn, "t1")  # exists already: nothing written
        events_sql.append(conn, "task", "t1", "submitted", "{}", NOW)
    # One task per free lane, the best head first (a higher priority; then oldest).
    assert leasable(conn) == ["t2", "t3"]
    assert leasable(conn, sites=["s", "other"], limit=1) == ["t2"]
    # Health's queue depths: by site, the most first; ``served`` leaves sites out.
    assert presence_sql.queued_totals(conn) == (3, 1)
    assert presence_sql.queued_totals(conn, served='["s"]') == (0, 0)
    assert [(r["site"], r["n"]) for r in presence_sql.queued_sites(conn, 10)] == [("s", 3)]
    assert presence_sql.queued_sites(conn, 10, served='["s", "t"]') == []

    with transaction(conn):
        [leased] = tasks_sql.take_leases(conn, [("t2", "tok")], "w1", "req", NOW + 30, NOW)
        assert leased["status"] == "leased"
        assert tasks_sql.take_leases(conn, [("t2", "tok2")], "w2", None, NOW + 30, NOW) == []
    assert leasable(conn) == ["t3"]  # lane s/a is blocked while t2 is in flight
    assert [r["task_id"] for r in tasks_sql.leased_by_request(conn, "w1", "req", None, 10)] \
        == ["t2"]

    with transaction(conn):
        [running] = tasks_sql.start_many(conn, [("t2", "tok", "w1", NOW + 1)], NOW + 120,
                                         NOW + 1)
        assert (running["status"], running["attempts"]) == ("running", 1)
        assert tasks_sql.renew(conn, "t2", "w1", "tok", NOW + 200, '{"p": 1}', NOW + 2)
        assert not tasks_sql.renew(conn, "t2", "w1", "wrong", NOW + 200, None, NOW + 2)
        [done] = tasks_sql.finish_many(conn, [tasks_sql.TaskFinish(
            job_id="t2", from_status="running", lease_token="tok", status="succeeded",
            result='{"ok": true}', error_code=None, error_message=None, cost=7,
            progress=None, outcome_digest="d", late_result=0, error_type=None,
            error_traceback=None)], NOW + 3)
        assert (done["status"], done["cost"], done["late_result"]) == ("succeeded", 7, 0)
        events_sql.append(conn, "task", "t2", "succeeded", "{}", NOW + 3, job=done)
    assert leasable(conn) == ["t1", "t3"]  # the lane is free again, t1 its head
    assert tasks_sql.count_unfinished(conn) == (
        ("queued", 2), ("leased", 0), ("running", 0), ("paused", 0), ("stale", 0))
    assert tasks_sql.next_deadline(conn, 14_400, NOW) == NOW + 3600


def test_unleased_tasks_pause_resume_and_cancel_with_a_null_token(conn: Connection) -> None:
    with transaction(conn):
        submit(conn, "t1")
        submit(conn, "t2", account="b")
        assert tasks_sql.pause_queued(conn, "t1", None, NOW)
        assert not tasks_sql.pause_queued(conn, "t1", None, NOW)  # no longer queued
        assert tasks_sql.resume(conn, "t1", None, NOW + 100, NOW)
        assert tasks_sql.cancel_unleased(conn, "t2", "queued", None, NOW)
        assert not tasks_sql.cancel_unleased(conn, "t1", "queued", "a token", NOW)
    row = tasks_sql.JOBS.get(conn, "t2")
    assert row is not None and (row["status"], row["completed_at"]) == ("canceled", NOW)
    assert leasable(conn) == ["t1"]


def test_a_purged_task_leaves_a_tombstone_that_keeps_its_id(conn: Connection) -> None:
    with transaction(conn):
        submit(conn, "t1")
        assert tasks_sql.cancel_unleased(conn, "t1", "queued", None, NOW)
        events_sql.append(conn, "task", "t1", "canceled", "{}", NOW)
    with transaction(conn):
        assert tasks_sql.JOBS.purge_completed_before(conn, NOW, NOW + 1) == ["t1"]
    assert tasks_sql.JOBS.get(conn, "t1") is None
    assert events_sql.history(conn, "task", "t1") == []  # the trigger took them along
    tombstone = tasks_sql.JOBS.known(conn, ["t1"])["t1"]  # what a submit of the id meets
    assert tombstone["status"] == "canceled"
    with transaction(conn):
        assert not submit(conn, "t1")  # the tombstone refuses the id
        assert tasks_sql.JOBS.purge_tombstones_before(conn, NOW + 1) == 1
        assert submit(conn, "t1")
    assert tasks_sql.existing(conn, ["t1", "t9"]) == {"t1"}


def test_the_job_history_appends_trims_and_counts(conn: Connection) -> None:
    with transaction(conn):
        submit(conn, "t1")
        first = events_sql.append(conn, "task", "t1", "submitted", "{}", NOW)
        second = events_sql.append(conn, "task", "t1", "leased", '{"w": 1}', NOW + 1)
        assert events_sql.append(conn, "task", "nope", "leased", "{}", NOW) is None
    assert first is not None and second is not None
    assert second["event_id"] == first["event_id"] + 1
    assert (second["tenant"], second["status"]) == ("ten", "queued")
    assert [r["kind"] for r in events_sql.history(conn, "task", "t1")] == ["submitted",
                                                                          "leased"]
    assert events_sql.last_event_id(conn) == second["event_id"]


def test_a_history_keeps_its_first_and_latest_at_the_cap(
        conn: Connection) -> None:
    cap, first = events_sql.HISTORY_CAP, events_sql.KEEP_FIRST
    with transaction(conn):
        submit(conn, "t1")
        submit(conn, "t2")
        row = {"tenant": "ten", "site": "s", "device_id": None, "status": "queued",
               "kind": "k"}
        events_sql.append_many(conn, "task", "submitted", NOW,
                               [("t1", "{}", row), ("t2", "{}", row)])
        for n in range(1, cap + 5):
            events_sql.append_many(conn, "task", "renewed", NOW + n,
                                   [("t1", f'{{"n": {n}}}', row)] +
                                   ([("t2", f'{{"n": {n}}}', row)] if n < 3 else []))
    kept = events_sql.history(conn, "task", "t1")
    assert len(kept) == cap
    assert [r["kind"] for r in kept[:2]] == ["submitted", "renewed"]
    assert kept[first]["at"] == NOW + cap + 4 - (cap - first - 1)  # the oldest after the first
    assert kept[-1]["at"] == NOW + cap + 4
    assert len(events_sql.history(conn, "task", "t2")) == 3
    with transaction(conn):  # one at a time: the same cap
        for n in range(cap + 2):
            events_sql.append(conn, "task", "t2", "renewed", "{}", NOW + n, job=row)
    assert len(events_sql.history(conn, "task", "t2")) == cap


def test_the_ledger_holds_settles_once_and_audits(conn: Connection) -> None:
    with transaction(conn):
        txn = ledger_sql.post(conn, "credit", "c1", "top-up", NOW,
                              [("@world", -100), ("ten", 100)])
        ledger_sql.record_credit(conn, "c1", "ten", 100, txn, NOW)
        ledger_sql.post(conn, "hold", "task:t1", None, NOW, [("ten", -30), ("@holds", 30)])
        ledger_sql.open_hold(conn, "task", "t1", "ten", 30, NOW)
        ledger_sql.add_held(conn, "ten", 30, NOW)
    account = ledger_sql.account(conn, "ten")
    assert account is not None and (account["balance"], account["held"]) == (70, 30)
    credit = ledger_sql.credit_by_ref(conn, "c1")
    assert credit is not None and credit["txn_id"] == txn >= 1

    with transaction(conn):
        assert ledger_sql.close_hold(conn, "task", "t1", 20, 10, "succeeded", NOW + 1)
        assert not ledger_sql.close_hold(conn, "task", "t1", 20, 10, "succeeded", NOW + 1)
        ledger_sql.post(conn, "charge", "task:t1", None, NOW + 1,
                        [("@holds", -30), ("@revenue", 20), ("ten", 10)])
        ledger_sql.add_held(conn, "ten", -30, NOW + 1)
    assert ledger_sql.was_settled(conn, "task", "t1")
    figures = ledger_sql.audit_figures(conn)
    assert figures["sum_balances"] == 0 and figures["open_holds"] == 0
    assert all(figures[k] == [] for k in ("unbalanced_txns", "cache_mismatch",
                                           "held_mismatch", "unresolved", "negative"))
    total, lines = ledger_sql.entries(conn, "ten", 10, 0)
    assert total == 3 and [r["kind"] for r in lines] == ["charge", "hold", "credit"]
    total, holds = ledger_sql.page_holds(conn, "ten", "settled", 10, 0)
    assert total == 1 and holds[0]["charged"] == 20
    assert ledger_sql.purge_settled_before(conn, NOW + 2, 10) == 1
    assert ledger_sql.was_settled(conn, "task", "t1")  # the settled id stays


def test_ledger_recovery_finds_holds_whose_job_ended_or_never_was(conn: Connection) -> None:
    with transaction(conn):
        submit(conn, "t1", max_cost=30)
        submit(conn, "t2", account="b", max_cost=None)
        ledger_sql.open_hold(conn, "task", "t1", "ten", 30, NOW)  # its own job
        ledger_sql.open_hold(conn, "task", "t2", "ten", 30, NOW)  # not its amount
        ledger_sql.open_hold(conn, "task", "t9", "ten", 5, NOW)  # no job at all
        tasks_sql.cancel_unleased(conn, "t1", "queued", None, NOW)
    found = {r["job_id"]: bool(r["own"]) for r in
             ledger_sql.recoverable(conn, "task", NOW + 1, 10)}
    assert found == {"t1": True, "t2": False, "t9": False}
    assert ledger_sql.job_known(conn, "task", "t2")
    assert not ledger_sql.job_known(conn, "task", "t9")


def test_queries_are_leased_oldest_first_by_site(conn: Connection) -> None:
    with transaction(conn):
        for i, site in enumerate(["x", "y", "x", "z"]):
            assert queries_sql.JOBS.insert_many(conn, [dict(
                query_id=f"q{i}", tenant="ten", site=site, kind="k", params="{}",
                max_cost=None, fingerprint="f", status="queued", created_at=NOW,
                updated_at=NOW, expires_at=NOW + 600)]) == 1
    assert [r["query_id"] for r in queries_sql.next_queued(conn, None, NOW, 3)] == [
        "q0", "q1", "q2"]
    assert [r["query_id"] for r in queries_sql.next_queued(conn, ["z", "x"], NOW, 10)] == [
        "q0", "q2", "q3"]
    with transaction(conn):
        assert queries_sql.take_leases(conn, [("q0", "tok")], "w", "r", NOW + 60, NOW) != []
        assert queries_sql.give_back(conn, "q0", "tok", NOW)
        assert queries_sql.take_leases(conn, [("q1", "tok")], "w", "r", NOW + 60, NOW) != []
        [done] = queries_sql.finish_many(conn, [queries_sql.QueryFinish(
            job_id="q1", lease_token="tok", status="succeeded", result="{}",
            error_code=None, error_message=None, cost=3, outcome_digest="d",
            error_type=None, error_traceback=None, next_attempt_at=None, errors=None,
            refund=0)], NOW + 1)
        assert done["attempts"] == 1
    assert queries_sql.next_deadline(conn) == NOW + 600
    assert queries_sql.count_live(conn, "queued") == (3, 2)
    assert [(r["site"], r["n"]) for r in queries_sql.live_sites(conn, "queued", 10)] == [
        ("x", 2), ("z", 1)]
    total, sites = queries_sql.sites_page(conn, 10, 0)
    assert total == 2 and [(r["site"], r["queued"], r["leased"]) for r in sites] == [
        ("x", 2, 0), ("z", 1, 0)]
    total, rows = page_rows(conn, "queries", {"tenant": "ten", "status": None}, 2, 0)
    assert total == 4 and [r["query_id"] for r in rows] == ["q3", "q2"]  # newest first


def test_keys_are_created_listed_newest_first_and_revoked(conn: Connection) -> None:
    with transaction(conn):
        first, _ = keys_sql.create(conn, role="client", name="a", tenant="t1", sites=None,
                                   now=NOW)
        second, key = keys_sql.create(conn, role="worker", name="b", tenant=None,
                                      sites=["s1"], now=NOW)
    assert key.startswith("lg_")
    total, rows = keys_sql.page(conn, 10, 0)
    assert total == keys_sql.count_all(conn) == 2
    assert [r["key_id"] for r in rows] == [second, first]  # same instant: later first
    with transaction(conn):
        assert keys_sql.revoke(conn, first, NOW + 1)
        assert not keys_sql.revoke(conn, first, NOW + 2)
    row = keys_sql.get(conn, first)
    assert row is not None and row["revoked_at"] == NOW + 1


def test_devices_are_seen_changed_and_evicted(conn: Connection) -> None:
    with transaction(conn):
        devices_sql.insert(conn, "ten", "d1", NOW)
        devices_sql.insert(conn, "ten", "d2", NOW + 1)
        devices_sql.seen(conn, "ten", "d1", NOW + 5)
        devices_sql.seen(conn, "ten", "d1", NOW + 2)  # an older sighting changes nothing
        version = devices_sql.change(conn, "ten", "d1", "online", "away", NOW + 6)
        assert version == 1
        assert devices_sql.change(conn, "ten", "d1", "online", "away", NOW + 6) is None
        submit(conn, "t1", device_id="d2")
    d1 = devices_sql.get(conn, "ten", "d1")
    assert d1 is not None and (d1["last_seen_at"], d1["pending"]) == (NOW + 5, 1)
    assert [r["device_id"] for r in devices_sql.pending(conn, NOW + 7)] == ["d1"]
    with transaction(conn):
        assert devices_sql.acted(conn, "ten", "d1", 1)
    total, rows = devices_sql.page(conn, "ten", 10, 0)
    assert total == 2 and {r["device_id"]: r["live_tasks"] for r in rows} == {"d1": 0, "d2": 1}
    assert [r["task_id"] for r in devices_sql.tasks_of(conn, "ten", "d2", ("queued",))] == [
        "t1"]
    with transaction(conn):
        evicted = devices_sql.evict_one(conn)  # d2 has a live task
        assert evicted is not None and evicted["device_id"] == "d1"
        assert devices_sql.evict_one(conn) is None
    assert devices_sql.by_state(conn) == {"online": 1}


def test_workers_are_seen_and_forgotten(conn: Connection) -> None:
    with transaction(conn):
        presence_sql.seen(conn, "w1", NOW, sites='["s"]', update_sites=True, key_id="k1")
        presence_sql.seen(conn, "w1", NOW - 5)  # older, and no lease call: sites stay
        presence_sql.seen(conn, "w2", NOW + 10, key_id="k1", update_sites=True)
    w1 = presence_sql.workers_page(conn, 10, 0)[1][1]
    assert (w1["worker_id"], w1["last_seen_at"], w1["sites"], w1["key_id"]) == (
        "w1", NOW, '["s"]', "k1")
    assert presence_sql.count_of_key(conn, "k1") == (2, NOW)
    assert [r["worker_id"] for r in presence_sql.online_workers(conn, 90, NOW + 95)] == ["w2"]
    with transaction(conn):
        assert presence_sql.forget_one_offline(conn, "k1", NOW + 1)
        assert not presence_sql.known(conn, "w1")


def test_the_health_probe_writes_and_commits(conn: Connection) -> None:
    probe_write(conn)
    assert not conn.in_transaction
    begin(conn)
    commit(conn)


def test_total_changes_counts_rows_written_not_read(conn: Connection) -> None:
    """What the runtime reads to tell a commit that wrote from one that only read."""
    before = conn.total_changes
    with transaction(conn):
        assert submit(conn, "t1") and submit(conn, "t2")
        tasks_sql.JOBS.get(conn, "t1")
    written = conn.total_changes - before
    assert written >= 2  # SQLite counts the lane triggers' rows too; PostgreSQL does not
    with transaction(conn):
        tasks_sql.JOBS.get(conn, "t2")
    assert conn.total_changes - before == written


def test_sqlite_keeps_statement_journals_in_memory(tmp_path: Path) -> None:
    """Every message applies in a savepoint, so a statement that may change many rows
    keeps a statement journal: on disk that is a temporary file per statement (a
    one-row set-based UPDATE cost four times as much). The WAL is what a crash recovers
    from, so memory loses nothing."""
    from leasegate.storage.connection import connect

    conn = connect(tmp_path / "leasegate.db")
    try:
        assert conn.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
    finally:
        conn.close()
