"""The operators' SQL (retry, redrive, sites, a retried job's hold, the lease path's
site filter) gives the same answers on SQLite and on PostgreSQL."""

from __future__ import annotations

from leasegate.storage import ledger_sql, operator_sql, queries_sql, tasks_sql
from leasegate.storage.connection import transaction
from leasegate.storage.engine import Connection
from tests.test_sql_engines import NOW, conn, submit

__all__ = ["conn"]  # the fixture, on both engines


def test_retry_redrive_and_the_site_filter(conn: Connection) -> None:
    with transaction(conn):
        for n, site in enumerate(["s", "s", "t"]):
            assert submit(conn, f"t{n}", site=site, account=f"a{n}")
            conn.execute("UPDATE tasks SET status = 'failed', completed_at = ?, "
                         "error_message = 'x', cost = 1 WHERE task_id = ?",
                         (NOW + n, f"t{n}"))
    matched, rows = operator_sql.redrive_candidates(conn, "task", "failed",
                                                    {"site": "s", "kind": None,
                                                     "tenant": "ten"}, None, None, 1)
    assert (matched, [r["job_id"] for r in rows]) == (2, ["t0"])
    assert operator_sql.redrive_candidates(conn, "task", "failed", {}, NOW + 1, NOW + 2,
                                           10)[0] == 1
    with transaction(conn):
        assert operator_sql.retry(conn, "task", "t0", "failed", NOW + 600, None, NOW + 5)
        assert not operator_sql.retry(conn, "task", "t0", "failed", NOW + 600, None, NOW + 5)
        assert operator_sql.retry(conn, "task", "t2", "failed", NOW + 600, None, NOW + 5)
    row = tasks_sql.JOBS.get(conn, "t0")
    assert row is not None and (row["status"], row["error_message"], row["cost"],
                                row["completed_at"]) == ("queued", None, None, None)
    assert operator_sql.queued_by_site(conn, "task", ["s", "t", "u"]) == {"s": 1, "t": 1}
    # The lease path passes over what the gate does not admit.
    ids = [r["task_id"] for r in tasks_sql.next_queued(
        conn, None, NOW + 6, 10, admit=lambda site: site != "s")]
    assert ids == ["t2"]


def test_sites_and_a_retried_hold(conn: Connection) -> None:
    with transaction(conn):
        operator_sql.set_site(conn, "s", paused=True, reason="down", by="ops",
                              leases_per_second=None, now=NOW)
        operator_sql.set_site(conn, "t", paused=False, reason=None, by="ops",
                              leases_per_second=2.5, now=NOW)
        operator_sql.set_site(conn, "s", paused=True, reason="still down", by="ops",
                              leases_per_second=1.0, now=NOW + 1)
    rows = [(r["site"], r["paused"], r["reason"], r["leases_per_second"])
            for r in operator_sql.site_controls(conn)]
    assert rows == [("s", 1, "still down", 1.0), ("t", 0, None, 2.5)]
    with transaction(conn):
        operator_sql.set_site(conn, "t", paused=False, reason=None, by="ops",
                              leases_per_second=None, now=NOW + 2)
    assert operator_sql.site_control(conn, "t") is None  # neither control: no row
    with transaction(conn):
        ledger_sql.open_hold(conn, "query", "q1", "ten", 10, NOW)
        assert ledger_sql.close_hold(conn, "query", "q1", 3, 7, "failed", NOW + 1)
        operator_sql.reopen_hold(conn, "query", "q1", "ten", 10, NOW + 2)
    hold = ledger_sql.hold(conn, "query", "q1")
    assert hold is not None and (hold["status"], hold["charged"]) == ("open", None)
    assert not ledger_sql.was_settled(conn, "query", "q1")
    with transaction(conn):
        assert queries_sql.JOBS.insert_many(conn, [dict(
            query_id="q1", tenant="ten", site="s", kind="k", params="{}", max_cost=10,
            fingerprint="f", status="expired", created_at=NOW, updated_at=NOW, expires_at=NOW,
            completed_at=NOW)]) == 1
        assert operator_sql.retry(conn, "query", "q1", "expired", NOW + 600, None, NOW + 3)
    assert [r["query_id"] for r in queries_sql.next_queued(
        conn, ["s"], NOW + 3, 10, admit=lambda site: True)] == ["q1"]
