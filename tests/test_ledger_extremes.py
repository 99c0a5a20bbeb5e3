"""Random money at its extremes, through HTTP: the books stay whole and every number an int.

Hypothesis picks the ledger's bounds (``ledger_max_amount``, ``ledger_max_balance``,
down to 1 and up to their ceilings) and a run of calls: credits, task and query
submits (alone and in batches) with ``max_cost``, results with ``cost``, cancels,
stale tasks reclaimed with a cost. Every amount is schema-valid but extreme: 0, 1,
a bound, one under it, one over it, 2**53. Each call is answered as the bounds say
(200/201, 402 short of funds, 422 past a bound), and after each one:

- the audit passes;
- the balances sum to zero, ``@world`` is minus every credit taken, and no account
  holds more than ``ledger_max_balance``;
- ``@holds`` equals the open holds, and no tenant is below zero;
- every number read back is an integer (never a float).

Each example runs a fresh in-process gateway on inline storage under the autojump
clock (a stale task is two virtual minutes away).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasegate.clock import Clock
from leasegate.settings import MAX_AMOUNT, MAX_BALANCE, load
from tests.conftest import EPOCH, Gateway, start_gateway

Json = dict[str, Any]
TENANTS = ("t1", "t2")
ACCOUNTS = ("t1", "t2", "@world", "@holds", "@revenue")
SHM = Path("/dev/shm")
ROUTES = {"task": "/v1/tasks", "query": "/v1/queries"}


@dataclass(frozen=True)
class Bounds:
    max_amount: int
    max_balance: int

    def amounts(self) -> st.SearchStrategy[int]:
        """Schema-valid amounts at the edges of these bounds."""
        edges = {0, 1, 2, self.max_amount - 1, self.max_amount, self.max_amount + 1,
                 self.max_balance - self.max_amount, self.max_balance // 2, MAX_AMOUNT - 1,
                 MAX_AMOUNT}
        return st.sampled_from(sorted(a for a in edges if 0 <= a <= MAX_AMOUNT))


@st.composite
def bounds(draw: st.DrawFn) -> Bounds:
    most = draw(st.sampled_from([1, 2, 1000, MAX_AMOUNT - 1, MAX_AMOUNT]))
    balance = draw(st.sampled_from([most, most + 1, 3 * most, MAX_BALANCE]))
    return Bounds(most, min(balance, MAX_BALANCE))


@st.composite
def runs(draw: st.DrawFn) -> tuple[Bounds, list[tuple[Any, ...]]]:
    """The bounds, and the calls: an opening credit for each tenant, then credits and
    submits twice as often as the rest (money is what is under test)."""
    limits = draw(bounds())
    amount = limits.amounts()
    cost = st.none() | amount
    tenant = st.sampled_from(TENANTS)
    credit = st.tuples(st.just("credit"), tenant, amount, st.integers(0, 5))
    submit = st.tuples(st.just("submit"), st.sampled_from(["task", "query"]), tenant,
                       st.lists(st.none() | amount, min_size=1, max_size=3), st.booleans())
    call = st.one_of(
        credit, submit, credit, submit,
        st.tuples(st.just("finish"), st.sampled_from(["task", "query"]),
                  st.sampled_from(["succeeded", "failed"]), cost),
        st.tuples(st.just("cancel"), st.integers(0, 5)),
        st.tuples(st.just("reclaim"), st.sampled_from(["succeeded", "failed", "requeue"]),
                  cost),
    )
    opening = [("credit", name, draw(amount), 10 + i) for i, name in enumerate(TENANTS)]
    return limits, opening + draw(st.lists(call, min_size=1, max_size=12))


@dataclass
class Books:
    """What the caller knows: the credits taken, the jobs submitted."""

    limits: Bounds
    credits: dict[str, tuple[str, int]] = field(default_factory=dict)  # ref -> (tenant, n)
    tasks: list[str] = field(default_factory=list)
    count: int = 0

    @property
    def credited(self) -> int:
        return sum(amount for _, amount in self.credits.values())

    def new_id(self, channel: str) -> str:
        self.count += 1
        return f"{channel}-{self.count}"


def assert_no_float(value: Any, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert_no_float(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            assert_no_float(item, f"{where}[{i}]")
    else:
        assert not isinstance(value, float), (where, value)


async def ask(gw: Gateway, method: str, path: str, who: str, body: Json | None = None,
              ) -> tuple[int, Json]:
    status, reply = await gw.call(method, path, who, json=body)
    assert status < 500, (method, path, status, reply)
    assert_no_float(reply, path)
    return status, reply


async def available(gw: Gateway, tenant: str) -> int:
    status, reply = await ask(gw, "GET", f"/v1/ledger/accounts/{tenant}", "admin")
    assert status == 200
    value: int = reply["available"]
    return value


async def credit(gw: Gateway, books: Books, tenant: str, amount: int, ref_no: int) -> None:
    ref = f"pay-{ref_no}"
    status, reply = await ask(gw, "POST", f"/v1/ledger/accounts/{tenant}/credit", "admin",
                              {"amount": amount, "ref": ref})
    limits, before = books.limits, books.credits.get(ref)
    if amount == 0:
        assert status == 400, reply  # the schema: a credit is at least 1
    elif before is not None:
        assert status == (200 if before == (tenant, amount) else 409), (before, reply)
    elif amount > limits.max_amount or books.credited + amount > limits.max_balance:
        assert status == 422 and reply["error"]["code"] == 6010, reply
    else:
        assert status == 200, reply
        books.credits[ref] = (tenant, amount)


async def submit(gw: Gateway, books: Books, channel: str, tenant: str,
                 max_costs: list[int | None], batched: bool) -> None:
    base = ({"site": "shop", "kind": "order", "params": {}} if channel == "task" else
            {"site": "shop", "kind": "balance", "params": {}})
    items: list[Json] = []
    for max_cost in max_costs:
        job_id = books.new_id(channel)
        extra = {"account": job_id} if channel == "task" else {}  # a lane each
        items.append({**base, **extra, f"{channel}_id": job_id, "max_cost": max_cost})
    money = await available(gw, tenant)
    expected = []
    for item in items:  # held in request order
        max_cost = item["max_cost"]
        if max_cost is not None and max_cost > books.limits.max_amount:
            expected.append(422)
        elif max_cost is not None and max_cost > money:
            expected.append(402)
        else:
            expected.append(201)
            money -= max_cost or 0
    path = ROUTES[channel]
    if batched:
        status, reply = await ask(gw, "POST", f"{path}/batch", tenant, {"items": items})
        assert status == 200, reply
        got = [answer["status"] for answer in reply["items"]]
    else:
        got = [(await ask(gw, "POST", path, tenant, item))[0] for item in items]
    assert got == expected, (items, got)
    books.tasks += [item["task_id"] for item, status in zip(items, got, strict=True)
                    if channel == "task" and status == 201]
    assert await available(gw, tenant) == money


async def lease_one(gw: Gateway, channel: str) -> Json | None:
    status, reply = await ask(gw, "POST", f"{ROUTES[channel]}/lease", "worker",
                              {"worker_id": "w1", "wait_seconds": 0})
    assert status == 200, reply
    return reply["items"][0] if reply["items"] else None


async def finish(gw: Gateway, channel: str, outcome: str, cost: int | None) -> None:
    leased = await lease_one(gw, channel)
    if leased is None:
        return
    job = f"{ROUTES[channel]}/{leased[f'{channel}_id']}"
    fence = {"worker_id": "w1", "lease_token": leased["lease_token"]}
    if channel == "task":
        assert (await ask(gw, "POST", f"{job}/start", "worker", fence))[0] == 200
    status, reply = await ask(gw, "POST", f"{job}/result", "worker",
                              {**fence, "outcome": outcome, "cost": cost})
    assert status == 200, reply


async def cancel(gw: Gateway, books: Books, index: int) -> None:
    if books.tasks:
        task_id = books.tasks[index % len(books.tasks)]
        status, _ = await ask(gw, "POST", f"/v1/tasks/{task_id}/cancel", "t1")
        assert status in (200, 404, 409)  # 404: another tenant's


async def reclaim(gw: Gateway, action: str, cost: int | None) -> None:
    """A started task left to go stale (its lease lapses), then settled by an operator."""
    leased = await lease_one(gw, "task")
    if leased is None:
        return
    job = f"/v1/tasks/{leased['task_id']}"
    fence = {"worker_id": "w1", "lease_token": leased["lease_token"]}
    assert (await ask(gw, "POST", f"{job}/start", "worker", fence))[0] == 200
    await trio.sleep(gw.system.settings.task_lease_ttl + 1)
    status, reply = await ask(gw, "POST", f"{job}/reclaim", "admin",
                              {"action": action, "reason": "checked",
                               "cost": None if action == "requeue" else cost})
    assert status == 200, reply


async def check_books(gw: Gateway, books: Books) -> None:
    await trio.testing.wait_all_tasks_blocked()  # settles follow their jobs' commits
    _, audit = await ask(gw, "GET", "/v1/ledger/audit", "admin")
    assert audit["ok"], audit
    views = {name: (await ask(gw, "GET", f"/v1/ledger/accounts/{name}", "admin"))[1]
             for name in ACCOUNTS}
    for name, view in views.items():
        assert all(type(view[k]) is int for k in ("available", "held", "balance")), view
        assert abs(view["balance"]) <= books.limits.max_balance, view
        if not name.startswith("@"):
            assert view["available"] >= 0 and view["held"] >= 0, view
    # An account's own balance is ``available`` (``balance`` adds what it has on hold,
    # which ``@holds`` carries too).
    assert sum(view["available"] for view in views.values()) == 0
    assert views["@world"]["balance"] == -books.credited
    _, holds = await ask(gw, "GET", "/v1/ledger/holds?status=open&limit=500", "admin")
    assert views["@holds"]["balance"] == sum(hold["amount"] for hold in holds["items"])
    assert sum(views[t]["held"] for t in TENANTS) == views["@holds"]["balance"]
    for tenant in TENANTS:
        _, entries = await ask(gw, "GET", f"/v1/ledger/accounts/{tenant}/entries?limit=500",
                               tenant)
        assert sum(entry["amount"] for entry in entries["items"]) == views[tenant]["available"]


async def play(path: Path, limits: Bounds, calls: list[tuple[Any, ...]]) -> None:
    options = load(environ={}, overrides={
        "sqlite_synchronous": "OFF", "unsafe_durability": True, "rate_limit_per_second": 0,
        "ledger_max_amount": limits.max_amount, "ledger_max_balance": limits.max_balance})
    books = Books(limits)
    async with trio.open_nursery() as nursery:
        gw = await start_gateway(nursery, path, options, Clock(EPOCH))
        for kind, *args in calls:
            if kind == "credit":
                await credit(gw, books, *args)
            elif kind == "submit":
                await submit(gw, books, *args)
            elif kind == "finish":
                await finish(gw, *args)
            elif kind == "cancel":
                await cancel(gw, books, *args)
            else:
                await reclaim(gw, *args)
            await check_books(gw, books)
        for jobs in ("/v1/tasks?limit=500", "/v1/queries?limit=500"):
            for tenant in TENANTS:  # every job's billing, as its tenant reads it
                for job in (await ask(gw, "GET", jobs, tenant))[1]["items"]:
                    billing = job["billing"] or {}
                    assert all(type(billing[k]) is int for k in ("max_cost", "charged",
                               "refunded") if billing.get(k) is not None), job
        gw.system.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs())
def test_the_books_stay_whole_at_the_extremes(run: tuple[Bounds, list[tuple[Any, ...]]]) -> None:
    limits, calls = run
    with tempfile.TemporaryDirectory(dir=SHM if SHM.is_dir() else None) as where:
        trio.run(play, Path(where) / "leasegate.db", limits, calls,
                 clock=trio.testing.MockClock(autojump_threshold=0))
