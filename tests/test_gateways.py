"""Several gateways on one database, in one process: what each promises holds for all.

Each gateway is a whole system and app of its own (its actors, connections, caches,
timers) on the one database of the test: two PostgreSQL gateways as deployed behind a
load balancer; on SQLite, two systems on one file (not how SQLite is served, but the
same rules hold). Time is virtual (autojump).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.actors.keys.records import CreateKey
from leasegate.actors.other_gateways import Notice, decode
from leasegate.clock import Clock
from leasegate.settings import Settings
from tests.conftest import Gateway, start_gateway
from tests.test_http_tasks import fence, get, lease, lease_one, start, submit

pytestmark = pytest.mark.both_engines

Json = dict[str, Any]
HOUSEKEEPING = 5.0  # short: on PostgreSQL each actor also takes a turn every second


async def two(nursery: trio.Nursery, tmp_path: Path, settings: Settings,
              clock: Clock) -> tuple[Gateway, Gateway]:
    settings = settings.replace(housekeeping_interval=HOUSEKEEPING)
    a = await start_gateway(nursery, tmp_path / "leasegate.db",
                            settings.replace(gateway="gw-a"), clock)
    b = await start_gateway(nursery, tmp_path / "leasegate.db",
                            settings.replace(gateway="gw-b"), clock)
    return a, b


async def named(nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
                name: str) -> Gateway:
    """Gateway ``name`` on the test's database, as served (deadlines polled each second)."""
    return await start_gateway(nursery, tmp_path / "leasegate.db",
                               settings.replace(gateway=name, deadline_poll_interval=1), clock)


async def health(gw: Gateway) -> Json:
    status, report = await gw.call("GET", "/health", "admin")
    assert status == 200, report
    details: Json = report["details"]
    return details


async def test_each_periodic_run_is_run_by_one_gateway(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    a, b = await two(nursery, tmp_path, settings, clock)
    await trio.sleep(10 * HOUSEKEEPING + 1)
    reports = {"gw-a": await health(a), "gw-b": await health(b)}
    assert {name: report["gateway"] for name, report in reports.items()} == {
        "gw-a": "gw-a", "gw-b": "gw-b"}
    for job in ("tasks.purge_tasks", "queries.purge_queries", "ledger.purge_settled_holds",
                "devices.device_presence", "artifacts.sweep_staging"):
        runs = {name: report["jobs"][job]["runs"] for name, report in reports.items()}
        # Ten intervals: ten runs among both, not ten each. (The staging sweep works in
        # a thread, while which the autojump clock may move on: at most ten.)
        least = 1 if job == "artifacts.sweep_staging" else 9
        assert least <= sum(runs.values()) <= 11, (job, runs)
        for report in reports.values():
            entry = report["jobs"][job]
            assert entry["last_run_by"] in ("gw-a", "gw-b"), (job, entry)
            assert not entry["overdue"], (job, entry)
    # This gateway's own memory: swept by each gateway, every interval.
    for report in reports.values():
        assert report["jobs"]["http.rate_limit_buckets"]["runs"] >= 9


async def test_a_revocation_on_one_gateway_is_honoured_by_all_within_a_second(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    autojump_clock.autojump_threshold = 0.1  # PostgreSQL: the notification's real time
    a, b = await two(nursery, tmp_path, settings.replace(key_revocation_poll_interval=0.5),
                     clock)
    made = await a.system.keys.ask(CreateKey("client", "shared", "t1"))
    key = {"Authorization": f"Bearer {made.key}"}
    status, _ = await b.call("GET", "/v1/tasks", headers=key)
    assert status == 200  # B verified it, and would trust it for VERIFIED_SECONDS
    status, _ = await a.call("DELETE", f"/v1/admin/keys/{made.key_id}", "admin")
    assert status == 200
    status, _ = await a.call("GET", "/v1/tasks", headers=key)
    assert status == 401  # the gateway that revoked it: at once
    await trio.sleep(1)  # PostgreSQL: notified; SQLite: looked within 0.5 s
    status, body = await b.call("GET", "/v1/tasks", headers=key)
    assert status == 401, body  # every other gateway: within a second
    assert body["error"]["message"] == "this API key was revoked"


async def test_a_gateway_starting_takes_no_live_claim_and_fencing_holds_across(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    a = await start_gateway(nursery, tmp_path / "leasegate.db",
                            settings.replace(gateway="gw-a"), clock)
    await submit(a, task_id="t1", account="x")
    await submit(a, task_id="t2", account="x")  # same lane: waits behind t1
    item = await lease_one(a)
    # B starts (migrations, its start-up audit and recovery) while A's claim is live.
    b = await start_gateway(nursery, tmp_path / "leasegate.db",
                            settings.replace(gateway="gw-b"), clock)
    assert await lease(b, "w2") == []  # the lane is A's worker's
    await start(b, item)  # started through B with A's lease: one database, one fence
    await trio.sleep(settings.task_claim_window + 5)  # past the claim window: started
    assert (await get(a, "t1"))["status"] == "running"
    status, reply = await b.call("POST", "/v1/tasks/t1/renew", "worker",
                                 json=fence(item, worker_id="w9"))
    assert status == 409, reply  # another worker's id: fenced on B as on A
    status, reply = await b.call("POST", "/v1/tasks/t1/result", "worker",
                                 json=fence(item, outcome="succeeded"))
    assert status == 200, reply
    assert [i["task_id"] for i in await lease(a)] == ["t2"]


async def test_the_claims_of_a_gateway_that_died_go_back_to_the_queue_on_another(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        engine: str, autojump_clock: trio.testing.MockClock) -> None:
    if engine == "sqlite":
        pytest.skip("one gateway per SQLite file: its own turns set every deadline")
    b = await named(nursery, tmp_path, settings, clock, "gw-b")
    async with trio.open_nursery() as doomed:
        a = await named(doomed, tmp_path, settings, clock, "gw-a")
        await submit(a, task_id="t1")
        item = await lease_one(a)
        doomed.cancel_scope.cancel()  # A dies: its claim was never started
    await trio.sleep(settings.task_claim_window + 3)  # B is idle: no call comes to it
    task = await get(b, "t1")
    assert task["status"] == "queued", task
    again = await lease_one(b, "w2")
    assert again["task_id"] == "t1" and again["lease_token"] != item["lease_token"]


async def test_an_artifact_uploaded_through_one_gateway_is_read_through_another(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    shared = tmp_path / "mounted-by-both"
    a, b = await two(nursery, tmp_path, settings.replace(artifacts_dir=str(shared)), clock)
    assert a.system.artifacts.root == b.system.artifacts.root == shared
    await submit(a, task_id="t1")
    item = await lease_one(a)
    await start(a, item)
    data = b"report " * 1000
    response = await a.client.put(
        "/v1/tasks/t1/artifacts/report.txt", data=data,
        headers={**a.auth("worker"), "X-Worker-Id": "w1", "X-Lease-Token": item["lease_token"]})
    assert response.status_code == 201
    response = await b.client.get("/v1/tasks/t1/artifacts/report.txt", headers=b.auth("t1"))
    assert response.status_code == 200 and await response.get_data() == data
    assert [p.name for p in shared.rglob("report.txt@*")]  # in the shared directory
    assert not (tmp_path / "artifacts").exists()


async def two_sharing_sites(nursery: trio.Nursery, tmp_path: Path, settings: Settings,
                            clock: Clock, engine: str) -> tuple[Gateway, Gateway]:
    """Two PostgreSQL gateways, each reading the site controls again every second."""
    if engine == "sqlite":
        pytest.skip("one gateway per SQLite file: its own actors hold every control")
    return await two(nursery, tmp_path, settings.replace(deadline_poll_interval=1), clock)


async def test_a_site_paused_through_one_gateway_is_not_leased_through_another(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        engine: str, autojump_clock: trio.testing.MockClock) -> None:
    a, b = await two_sharing_sites(nursery, tmp_path, settings, clock, engine)
    await submit(b, task_id="t1")
    status, reply = await b.call("POST", "/v1/queries", "t1",
                                 json={"query_id": "q1", "site": "shop", "kind": "k",
                                       "params": {}})
    assert status == 201, reply
    status, _ = await a.call("POST", "/v1/sites/shop/pause", "admin",
                             json={"reason": "maintenance"})
    assert status == 200
    await trio.sleep(1.5)  # one deadline_poll_interval: B has reloaded the controls
    assert await lease(b) == []
    status, queries = await b.call("POST", "/v1/queries/lease", "worker",
                                   json={"worker_id": "w1", "wait_seconds": 0})
    assert (status, queries["items"]) == (200, [])
    status, _ = await a.call("POST", "/v1/sites/shop/resume", "admin",
                             json={"reason": "done"})
    assert status == 200
    await trio.sleep(1.5)
    assert (await lease_one(b))["task_id"] == "t1"


async def test_a_throttle_set_through_one_gateway_is_one_budget_for_all_and_both_channels(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        engine: str, autojump_clock: trio.testing.MockClock) -> None:
    a, b = await two_sharing_sites(nursery, tmp_path, settings, clock, engine)
    for n in range(12):
        await submit(a, task_id=f"t{n}", account=f"a{n}")
        status, reply = await b.call("POST", "/v1/queries", "t1", json={
            "query_id": f"q{n}", "site": "shop", "kind": "k", "params": {}})
        assert status == 201, reply
    status, _ = await a.call("PUT", "/v1/sites/shop/throttle", "admin",
                             json={"leases_per_second": 2})
    assert status == 200
    await trio.sleep(1.5)  # one deadline_poll_interval: B has reloaded the controls

    async def lease_queries(gw: Gateway, **fields: Any) -> list[Json]:
        status, reply = await gw.call("POST", "/v1/queries/lease", "worker", json={
            "worker_id": "w2", "wait_seconds": 0, "max": 10, **fields})
        assert status == 200, reply
        items: list[Json] = reply["items"]
        return items

    # The first token, taken by a task through A, is gone for a query through B too.
    assert len(await lease(a, max=10)) == 1
    assert await lease_queries(b) == [] and await lease(b, max=10) == []
    await trio.sleep(0.5)
    assert len(await lease_queries(b)) == 1
    assert await lease_queries(a) == [] and await lease(a, max=10) == []
    # Parked workers of both channels on both gateways: one lease every half second
    # among them all, exactly when the next token is due, the channels in turn (the one
    # that drew last lets the other go first: queries drew last above).
    start, got = trio.current_time(), list[tuple[float, str, str | None]]()

    async def worker(gw: Gateway, channel: str) -> None:
        while len(got) < 6:
            status, reply = await gw.call("POST", f"/v1/{channel}/lease", "worker", json={
                "worker_id": f"w-{channel}", "wait_seconds": 5, "max": 10})
            assert status == 200, reply
            got.extend((trio.current_time() - start, channel, gw.system.settings.gateway)
                       for _ in reply["items"])
        workers.cancel_scope.cancel()

    async with trio.open_nursery() as workers:
        for gw in (a, b):
            for channel in ("tasks", "queries"):
                workers.start_soon(worker, gw, channel)
    assert [when for when, _, _ in got] == pytest.approx([0.5 * n for n in range(1, 7)],
                                                          abs=1e-6)
    assert [channel for _, channel, _ in got] == ["tasks", "queries"] * 3
    # Which gateway's parked worker takes a token is not asserted: both gateways wake at
    # the same virtual time and trio orders such tasks at random (all six went to one
    # gateway in about one run in thirty). That the budget is one across gateways is
    # shown above: a token drawn through A is gone for B, and the next drawn through B is
    # gone for A.


async def test_a_query_waiting_for_its_retry_is_leased_through_another_gateway_on_time(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        engine: str, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The row guards the wait (no gateway leases it early), the gateway whose timer
    ends it wakes the leases parked on the others, and a gateway that dies with the wait
    pending leaves it to another's timer."""
    if engine == "sqlite":
        pytest.skip("one gateway per SQLite file: its own turns set every deadline")
    from leasegate.actors.queries import results as query_results
    from tests.test_query_retries import Fixed

    monkeypatch.setattr(query_results, "JITTER", Fixed(1.0))
    b = await named(nursery, tmp_path, settings, clock, "gw-b")
    async with trio.open_nursery() as doomed:
        a = await named(doomed, tmp_path, settings, clock, "gw-a")
        for query_id in ("q1", "q2"):
            status, _ = await a.call("POST", "/v1/queries", "t1", json={
                "query_id": query_id, "site": "shop", "kind": "k", "params": {}})
            assert status == 201
        status, reply = await a.call("POST", "/v1/queries/lease", "worker", json={
            "worker_id": "w1", "wait_seconds": 0, "max": 2})
        leases = {item["query_id"]: item for item in reply["items"]}

        async def fail(query_id: str) -> None:
            item = leases[query_id]
            status, reply = await a.call("POST", f"/v1/queries/{query_id}/result", "worker",
                                         json={"worker_id": "w1", "outcome": "failed",
                                               "lease_token": item["lease_token"],
                                               "error": {"message": "down"}})
            assert (status, reply["status"]) == (200, "queued"), reply

        # 1. A is alive: its timer ends the wait and wakes the lease parked on B
        began = trio.current_time()
        await fail("q1")
        status, reply = await b.call("POST", "/v1/queries/lease", "worker", json={
            "worker_id": "w2", "wait_seconds": 0, "sites": ["shop"]})
        assert reply["items"] == []  # waiting: not leasable on any gateway
        status, reply = await b.call("POST", "/v1/queries/lease", "worker", json={
            "worker_id": "w2", "wait_seconds": 30, "sites": ["shop"]})
        assert [i["query_id"] for i in reply["items"]] == ["q1"]
        assert trio.current_time() - began == pytest.approx(2, abs=0.2)
        # 2. A dies with q2's wait pending: B's own timer ends it
        await fail("q2")
        doomed.cancel_scope.cancel()
    began = trio.current_time()
    status, reply = await b.call("POST", "/v1/queries/lease", "worker", json={
        "worker_id": "w2", "wait_seconds": 30, "sites": ["shop"]})
    assert [i["query_id"] for i in reply["items"]] == ["q2"]
    assert trio.current_time() - began <= 2.2


async def test_work_a_gateways_own_parked_lease_took_is_not_announced_to_the_others(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        engine: str, autojump_clock: trio.testing.MockClock) -> None:
    """A submit that a lease parked on the same gateway takes whole (fewer than its max
    came) tells the other gateways nothing of its site; one that no lease took there
    tells them, and wakes the lease parked on another gateway."""
    if engine == "sqlite":
        pytest.skip("one gateway per SQLite file: nothing crosses")
    autojump_clock.autojump_threshold = 0.1  # PostgreSQL: the notification's real time
    a, b = await two(nursery, tmp_path, settings, clock)
    heard: list[Notice] = []
    listener = b.system.elsewhere.listener
    assert listener is not None
    deliver = listener.deliver

    def spy(raw: list[str]) -> None:
        heard.extend(n for payload in raw if (n := decode(payload)) is not None)
        deliver(raw)

    listener.deliver = spy

    def sites_heard() -> set[tuple[str, ...]]:
        return {t for n in heard for t in n.topics if t[0] == "site"}

    got: list[list[Json]] = []

    async def poll(gw: Gateway, worker_id: str) -> None:
        got.append(await lease(gw, worker_id, wait_seconds=20, sites=["shop"], max=5))

    async with trio.open_nursery() as polls:
        polls.start_soon(poll, a, "w1")
        await trio.sleep(1)
        await submit(a, task_id="t1")
        await trio.sleep(1)
        assert [[i["task_id"] for i in items] for items in got] == [["t1"]]
        assert heard and sites_heard() == set()  # the job's change went; its site did not
        polls.start_soon(poll, b, "w2")
        await trio.sleep(1)
        await submit(a, task_id="t2", account="acct-2")  # nobody parked on A
        await trio.sleep(1)
        assert [i["task_id"] for i in got[1]] == ["t2"]  # B's parked lease woke
        assert sites_heard() == {("site", "shop"), ("site", "*")}
