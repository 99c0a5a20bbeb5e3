"""Searching jobs: by id prefix, kind, status, site, account, tenant, worker, a time
range and text inside params and errors, on both engines alike; unknown filters are
a 400; a text search reads a bounded window and says how much it read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leasegate.actors.payloads import canonical_json
from leasegate.storage import search_sql, tasks_sql
from leasegate.storage.connection import transaction
from leasegate.storage.engine import Connection
from leasegate.storage.search_sql import Search
from tests.conftest import Gateway
from tests.test_http_tasks import call, fence, finish, lease_one, start, submit
from tests.test_sql_engines import conn

__all__ = ["conn"]  # the fixture, on both engines

NOW = 1_000.0
TEXT_COLUMNS = ("params", "error_message", "error_type")


def add(conn: Connection, task_id: str, *, at: float, params: Any = None, **more: Any) -> None:
    values = {"tenant": "ten", "site": "s", "account": "a", "kind": "k", **more}
    assert tasks_sql.JOBS.insert_many(
        conn, [dict(task_id=task_id, params=canonical_json(params or {}), priority=0,
        fingerprint=f"fp-{task_id}", status="queued", created_at=at, updated_at=at,
        expires_at=at + 3600, **values)]) == 1


def found(conn: Connection, **search: Any) -> list[str]:
    equal: dict[str, str | None] = {
        k: search.pop(k) for k in ("site", "kind", "tenant", "status", "account") if k in search}
    _, rows, _ = search_sql.search_page(conn, "tasks", "task_id", Search(equal, **search),
                                        TEXT_COLUMNS, 50, 0)
    return [row["task_id"] for row in rows]


def test_every_filter_is_the_same_on_both_engines(conn: Connection) -> None:
    with transaction(conn):
        add(conn, "bulk-0", at=NOW, params={"sku": "X-1", "note": 'say "hi"'})
        add(conn, "bulk-01", at=NOW + 1, kind="transfer", params={"sku": "café"})
        add(conn, "bulk-1", at=NOW + 2, site="books", params={"SKU": "x-1"})
        add(conn, "Bulk-0x", at=NOW + 3, tenant="other")
        add(conn, "bulk_0", at=NOW + 4)  # "_" is no wildcard here
        add(conn, "bulk-2", at=NOW + 5, params={"percent": "50%"})
        conn.execute("UPDATE tasks SET status = 'failed', error_message = 'Sold out', "
                     "error_type = 'shop.errors.OutOfStock', error_traceback = 'Traceback ...', "
                     "lease_owner = 'desk-1' WHERE task_id = 'bulk-1'")
    # Newest first; an id prefix is the start of ids, case and all.
    assert found(conn, id_prefix="bulk-0") == ["bulk-01", "bulk-0"]
    assert found(conn, id_prefix="Bulk") == ["Bulk-0x"]
    assert found(conn, id_prefix="bulk-") == ["bulk-2", "bulk-1", "bulk-01", "bulk-0"]
    assert found(conn, kind="transfer") == ["bulk-01"]
    assert found(conn, site="books", status="failed") == ["bulk-1"]
    assert found(conn, tenant="other") == ["Bulk-0x"]
    _, rows, _ = search_sql.search_page(conn, "tasks", "task_id",
                                        Search({"lease_owner": "desk-1"}), TEXT_COLUMNS, 50, 0)
    assert [r["task_id"] for r in rows] == ["bulk-1"]
    assert found(conn, since=NOW + 1, until=NOW + 3) == ["bulk-1", "bulk-01"]
    # Text: in params (keys and values) and errors, ASCII letters in either case.
    assert found(conn, text="x-1") == ["bulk-1", "bulk-0"]
    assert found(conn, text="sku") == ["bulk-1", "bulk-01", "bulk-0"]
    assert found(conn, text="CAFÉ") == []  # only ASCII letters fold, on both engines
    assert found(conn, text="café") == ["bulk-01"]
    assert found(conn, text='say "hi"') == ["bulk-0"]  # as typed, found in its JSON spelling
    assert found(conn, text="50%") == ["bulk-2"]  # "%" is no wildcard
    assert found(conn, text="sold OUT") == ["bulk-1"]
    assert found(conn, text="OutOfStock", kind="k") == ["bulk-1"]
    assert found(conn, text="nowhere") == []


def test_a_text_search_reads_a_bounded_window(conn: Connection,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_sql, "TEXT_WINDOW", 3)
    with transaction(conn):
        for n in range(5):
            add(conn, f"t{n}", at=NOW + n, params={"n": f"needle-{n}"})
    total, rows, searched = search_sql.search_page(
        conn, "tasks", "task_id", Search({}, text="needle"), TEXT_COLUMNS, 50, 0)
    assert (total, [r["task_id"] for r in rows]) == (3, ["t4", "t3", "t2"])
    assert searched == search_sql.Searched(3, complete=False)
    # Narrowed by the other filters, the window reaches the older ones, and says so.
    total, rows, searched = search_sql.search_page(
        conn, "tasks", "task_id", Search({}, until=NOW + 2, text="needle"), TEXT_COLUMNS,
        50, 0)
    assert [r["task_id"] for r in rows] == ["t1", "t0"]
    assert searched == search_sql.Searched(2, complete=True)


# ---- over HTTP ------------------------------------------------------------------------

async def listing(gw: Gateway, query: str, who: str = "admin",
                  path: str = "/v1/tasks") -> tuple[int, Any]:
    return await call(gw, "GET", f"{path}?{query}", who)


async def test_the_api_searches_with_every_filter(gateway: Gateway) -> None:
    await submit(gateway, task_id="bulk-0", kind="transfer", params={"iban": "DE44"})
    await submit(gateway, task_id="bulk-1", account="b", params={"iban": "FR76"})
    await submit(gateway, task_id="other-0", who="t2", account="c")
    item = await lease_one(gateway, "desk-7", sites=["shop"], max=1)
    await start(gateway, item, "desk-7")
    await finish(gateway, item, "failed", "desk-7", error={
        "message": "account locked", "type": "bank.Locked", "traceback": "Traceback ...\n"})
    failed = item["task_id"]

    def ids(body: Any) -> list[str]:
        return [t["task_id"] for t in body["items"]]

    assert ids((await listing(gateway, "id_prefix=bulk-"))[1]) == ["bulk-1", "bulk-0"]
    assert ids((await listing(gateway, "kind=transfer"))[1]) == ["bulk-0"]
    assert ids((await listing(gateway, "tenant=t2"))[1]) == ["other-0"]
    assert ids((await listing(gateway, "worker=desk-7&status=failed"))[1]) == [failed]
    assert ids((await listing(gateway, "text=LOCKED"))[1]) == [failed]
    status, body = await listing(gateway, "text=fr76")
    assert ids(body) == ["bulk-1"] and body["searched"] == {"rows": 3, "complete": True}
    assert (await listing(gateway, "kind=transfer"))[1]["searched"] is None
    status, body = await listing(gateway, "since=2026-11-30T08:00:00Z&until=2026-11-30T08:01:00Z")
    assert status == 200 and ids(body) == ["other-0", "bulk-1", "bulk-0"]
    assert ids((await listing(gateway, "since=2026-11-30T09:00:00Z"))[1]) == []
    assert ids((await listing(gateway, "until=2026-11-30T08:00:00Z"))[1]) == []
    # A client sees its own tenant's alone: another tenant's filter finds nothing.
    assert ids((await listing(gateway, "id_prefix=bulk-", "t2"))[1]) == []
    assert ids((await listing(gateway, "tenant=t1", "t2"))[1]) == []
    assert ids((await listing(gateway, "tenant=t2", "t2"))[1]) == ["other-0"]
    # The error as the worker raised it.
    status, task = await call(gateway, "GET", f"/v1/tasks/{failed}", "admin")
    assert task["error"] == {"code": None, "message": "account locked", "type": "bank.Locked",
                             "traceback": "Traceback ...\n"}


@pytest.mark.parametrize("query", [
    "bogus=1", "id=bulk-0", "text=", "text=" + "x" * 201, "since=yesterday",
    "until=2026-11-30", "worker=a%20b", "id_prefix=" + "a" * 65, "status=done",
    "text=a%00b"])
async def test_an_unknown_or_bad_filter_is_a_400(gateway: Gateway, query: str) -> None:
    for path in ("/v1/tasks", "/v1/queries"):
        status, body = await listing(gateway, query, path=path)
        assert status == 400 and body["error"]["code"] == 4000, (path, query, body)


async def test_queries_are_searched_the_same_way(gateway: Gateway) -> None:
    for query_id, params in (("q-a", {"city": "Lyon"}), ("q-b", {"city": "Oslo"})):
        status, _ = await call(gateway, "POST", "/v1/queries", "t1", {
            "query_id": query_id, "site": "shop", "kind": "weather", "params": params})
        assert status == 201
    status, body = await listing(gateway, "text=lyon&kind=weather&id_prefix=q-",
                                 path="/v1/queries")
    assert [q["query_id"] for q in body["items"]] == ["q-a"]


async def test_an_error_detail_is_bounded_and_checked(gateway: Gateway) -> None:
    item = None
    await submit(gateway, task_id="e1")
    item = await lease_one(gateway)
    await start(gateway, item)
    for error in ({"message": "x", "traceback": "t" * 8193}, {"message": "x", "type": ""},
                  {"message": "x", "type": "T" * 257}):
        status, body = await call(gateway, "POST", "/v1/tasks/e1/result", "worker",
                                  fence(item, outcome="failed", error=error))
        assert status == 400, body
    done = await finish(gateway, item, "failed", error={"message": "x", "type": "E",
                                                         "traceback": "t" * 8192})
    assert len(done["error"]["traceback"]) == 8192


# ---- the console -----------------------------------------------------------------------

async def console_get(gw: Gateway, path: str) -> tuple[int, str, str]:
    response = await gw.client.post("/console/sign-in", form={"key": gw.keys["admin"]})
    assert response.status_code == 303
    response = await gw.client.get(path)
    return (response.status_code, await response.get_data(as_text=True),
            response.headers.get("Location", ""))


async def test_the_console_searches_and_refuses_what_it_does_not_know(gateway: Gateway) -> None:
    await submit(gateway, task_id="bulk-00", kind="transfer")
    await submit(gateway, task_id="bulk-01", account="b", kind="refund")
    status, html, _ = await console_get(gateway, "/console/tasks?id=bulk-0")
    assert status == 200 and "bulk-00" in html and "bulk-01" in html
    status, html, _ = await console_get(gateway, "/console/tasks?kind=transfer&id=&site=")
    assert status == 200 and "bulk-00" in html and "bulk-01</a>" not in html
    status, _, where = await console_get(gateway, "/console/tasks?id=bulk-01")
    assert status == 303 and where.endswith("/console/tasks/bulk-01")  # names a task: open it
    status, html, _ = await console_get(gateway, "/console/tasks?colour=red")
    assert status == 400 and "colour: not a filter of this page" in html
    status, html, _ = await console_get(gateway, "/console/queries?account=a")
    assert status == 400 and "account: not a filter" in html
    status, html, _ = await console_get(gateway, "/console/tasks?id=bulk-&limit=1")
    assert status == 200 and html.count('<tr data-job-id="bulk-0') == 1 and "1–1 of 2" in html
    status, html, _ = await console_get(gateway,
                                        "/console/tasks?since=2026-11-30T07:59&text=x1")
    assert status == 200 and "bulk-00" in html and 'class="muted searched"' in html


async def test_the_console_shows_an_error_with_its_traceback(gateway: Gateway) -> None:
    await submit(gateway, task_id="e2")
    item = await lease_one(gateway)
    await start(gateway, item)
    await finish(gateway, item, "failed", error={
        "message": "sku-1 sold out", "type": "shop.OutOfStock",
        "traceback": "Traceback (most recent call last):\n  File \"h.py\", line 3\n"})
    status, html, _ = await console_get(gateway, "/console/tasks/e2")
    assert status == 200
    assert '<strong class="error-type">shop.OutOfStock</strong>' in html
    assert '<span class="error-message">sku-1 sold out</span>' in html
    assert '<details class="traceback" open><summary>Traceback</summary><pre>Traceback' in html


def test_a_search_walks_the_creation_index_never_sorts(tmp_path: Path) -> None:
    """The newest first of any filter, and a text search's window, are read in
    ``created_at`` order from ``tasks_created`` / ``queries_created``: no sort of every
    row kept for retention (a text search sorts what it found in its window)."""
    from leasegate.storage.connection import connect
    from leasegate.storage.migrations import migrate as migrate_sqlite

    conn = connect(tmp_path / "plans.db", synchronous="OFF")
    migrate_sqlite(conn)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)  # each statement, its values in place
    for table, id_column in (("tasks", "task_id"), ("queries", "query_id")):
        for search in (Search({}), Search({"site": "s"}, text="x"),
                       Search({"kind": "k"}, since=1.0, until=2.0)):
            seen.clear()
            search_sql.search_page(conn, table, id_column, search, TEXT_COLUMNS, 50, 0)
            statements = [sql for sql in seen if "ORDER BY" in sql]
            assert statements
            for sql in statements:
                lines = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
                assert any(f"{table}_created" in line for line in lines), (sql, lines)
                if "rowid IN (" not in sql:  # else: a sort of the window's matches alone
                    assert not any("TEMP B-TREE" in line for line in lines), (sql, lines)
