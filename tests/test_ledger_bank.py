"""The bank test: money adds up across kill -9 of the served gateway.

Three tenants are credited; their clients submit tasks and queries with
``max_cost`` while a few workers run them with random outcomes and costs, and
the server is killed (SIGKILL, no drain) at random moments and restarted on
the same data directory. Everyone retries what a crash cut short, as real
callers do. Once the work is drained and recovery has run, the books must
say: the audit passes, every hold was settled once (charge + refund = hold),
each job was charged what its outcome and reported cost call for, and each
tenant holds what it was credited minus what it was charged, every unit of
money accounted for in ``@revenue``.

Short settings make recovery happen in seconds: a 1 s lease and claim window,
a 2 s hard timeout, orphan holds refunded past 2.5 s, recovery every 0.2 s.
Every random choice comes from a fixed seed (the interleaving is the OS's).

Also here: a resubmit of a purged job id (answered from its tombstone) never
takes a new hold, on virtual time.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing

from leasegate.clock import Clock
from leasegate.settings import DAY, HOUR, Settings
from tests.conftest import Gateway, start_gateway
from tests.served import Served, restart, start, stop
from tests.test_http_tasks import ORDER, assert_error, call, finish, lease_one
from tests.test_http_tasks import start as start_task

Json = dict[str, Any]

SEED = 20261130
TENANTS = ("bank-a", "bank-b", "bank-c")
MAX_JOBS_PER_TENANT = 200  # submitters go on until the last restart is past
FIRST_CREDIT = 400
TOP_UP = 250
KILLS = 3
LANES = 10  # task accounts: a lane (site + account) runs one task at a time
BANK_ENV = {
    "LEASEGATE_LEDGER_RECOVER_INTERVAL": "0.2",
    "LEASEGATE_LEDGER_AUDIT_INTERVAL": "0.5",
    "LEASEGATE_LEDGER_ORPHAN_MAX_AGE": "2.5",
    "LEASEGATE_TASK_HARD_TIMEOUT": "2",
    "LEASEGATE_TASK_CLAIM_WINDOW": "1",
    "LEASEGATE_TASK_LEASE_TTL": "1",
    "LEASEGATE_QUERY_LEASE_TTL": "1",
    "LEASEGATE_RATE_LIMIT_PER_SECOND": "0",
}
GIVE_UP_AFTER = 45.0  # a hang fails the test instead of the suite
PATHS = {"task": "/v1/tasks", "query": "/v1/queries"}
TERMINAL = {"task": ("succeeded", "failed", "canceled"),
            "query": ("succeeded", "failed", "expired")}


def charge_for(max_cost: int, outcome: str, cost: int | None) -> int:
    """What a job pays of its hold (the rule of the ledger, as a user reads it)."""
    if cost is None:
        return max_cost if outcome == "succeeded" else 0
    return min(cost, max_cost)


@dataclass
class Submitted:
    channel: str
    tenant: str
    max_cost: int
    answer: str  # "created", "refused" (402) or "unknown" (never answered)


@dataclass
class Bank:
    """What the callers know: their submits, the results and reclaims accepted."""

    url: str
    keys: dict[str, str]
    deadline: float
    jobs: dict[str, Submitted] = field(default_factory=dict)
    reports: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    credited: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    surprises: list[str] = field(default_factory=list)
    stop_submitting: threading.Event = field(default_factory=threading.Event)
    stop_workers: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, who: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=5,
                            headers={"Authorization": f"Bearer {self.keys[who]}"})

    def send(self, http: httpx.Client, method: str, path: str,
             body: Json | None = None) -> httpx.Response | None:
        """The request, retried while the server is down; None past the deadline."""
        while time.monotonic() < self.deadline:
            try:
                reply = http.request(method, path, json=body)
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            if reply.status_code == 503:
                time.sleep(0.05)
                continue
            if reply.status_code >= 500:
                self.surprise(f"{method} {path}: {reply.status_code} {reply.text}")
            return reply
        return None

    def surprise(self, what: str) -> None:
        with self.lock:
            self.surprises.append(what)

    def credit(self, http: httpx.Client, tenant: str, amount: int, ref: str) -> None:
        reply = self.send(http, "POST", f"/v1/ledger/accounts/{tenant}/credit",
                          {"amount": amount, "ref": ref})
        if reply is None or reply.status_code != 200:
            self.surprise(f"credit {ref}: {reply and reply.text}")
            return
        with self.lock:
            self.credited[tenant] += amount


# ---- the callers ----------------------------------------------------------------------

def submitter(bank: Bank, tenant: str, rng: random.Random) -> None:
    with bank.client(tenant) as http, bank.client("admin") as admin:
        for n in range(MAX_JOBS_PER_TENANT):
            if bank.stop_submitting.is_set():
                break
            if n == 10:
                bank.credit(admin, tenant, TOP_UP, f"{tenant}-top-up")
            max_cost = rng.randint(1, 40)
            if rng.random() < 0.6:
                channel, job_id = "task", f"t-{tenant}-{n}"
                body: Json = {"task_id": job_id, "site": "shop",
                              "account": f"acct-{rng.randrange(LANES)}",
                              "kind": "place_order", "params": {"n": n}}
            else:
                channel, job_id = "query", f"q-{tenant}-{n}"
                body = {"query_id": job_id, "site": "shop", "kind": "balance",
                        "params": {"n": n}}
            reply = bank.send(http, "POST", PATHS[channel], {**body, "max_cost": max_cost})
            if reply is None:
                answer = "unknown"
            elif reply.status_code in (200, 201):
                answer = "created"
            elif reply.status_code == 402 and reply.json()["error"]["code"] == 6007:
                answer = "refused"
            else:
                bank.surprise(f"submit {job_id}: {reply.status_code} {reply.text}")
                answer = "unknown"
            with bank.lock:
                bank.jobs[job_id] = Submitted(channel, tenant, max_cost, answer)
            if channel == "task" and answer == "created" and rng.random() < 0.1:
                cancel = bank.send(http, "POST", f"/v1/tasks/{job_id}/cancel")
                if cancel is not None and cancel.status_code not in (200, 409):
                    bank.surprise(f"cancel {job_id}: {cancel.status_code} {cancel.text}")
            time.sleep(rng.uniform(0, 0.06))


def outcome_and_cost(rng: random.Random, outcomes: tuple[str, ...]) -> tuple[str, int | None]:
    return rng.choice(outcomes), (None if rng.random() < 0.3 else rng.randint(0, 50))


def report(bank: Bank, http: httpx.Client, path: str, job_id: str, body: Json) -> None:
    """A worker's (or an operator's) result; recorded once the gateway accepted it."""
    reply = bank.send(http, "POST", path, body)
    if reply is not None and reply.status_code == 200:
        with bank.lock:
            bank.reports[job_id] = (body.get("outcome") or body["action"], body.get("cost"))
    elif reply is not None and reply.status_code != 409:  # 409: the lease was lost
        bank.surprise(f"{path}: {reply.status_code} {reply.text}")


def leased(bank: Bank, http: httpx.Client, channel: str, worker_id: str) -> Iterator[Json]:
    """The items a worker leases on ``channel`` (tasks or queries) until the workers stop."""
    while not bank.stop_workers.is_set():
        reply = bank.send(http, "POST", f"/v1/{channel}/lease",
                          {"worker_id": worker_id, "wait_seconds": 0.2, "max": 2})
        if reply is not None and reply.status_code == 200:
            yield from reply.json()["items"]


def task_worker(bank: Bank, worker_id: str, rng: random.Random) -> None:
    with bank.client("worker") as http:
        for item in leased(bank, http, "tasks", worker_id):
            task_id = item["task_id"]
            fence = {"worker_id": worker_id, "lease_token": item["lease_token"]}
            started = bank.send(http, "POST", f"/v1/tasks/{task_id}/start", fence)
            if started is None or started.status_code != 200:
                continue  # the claim lapsed (a crash) or was withdrawn: never touched
            time.sleep(rng.uniform(0, 0.01))
            outcome, cost = outcome_and_cost(
                rng, ("succeeded", "succeeded", "succeeded", "failed", "canceled"))
            if started.json()["cancel_requested"]:
                outcome = "canceled"
            body: Json = {**fence, "outcome": outcome,
                          **({} if cost is None else {"cost": cost})}
            report(bank, http, f"/v1/tasks/{task_id}/result", task_id, body)


def query_worker(bank: Bank, worker_id: str, rng: random.Random) -> None:
    with bank.client("worker") as http:
        for item in leased(bank, http, "queries", worker_id):
            outcome, cost = outcome_and_cost(rng, ("succeeded", "succeeded", "failed"))
            body: Json = {"worker_id": worker_id, "lease_token": item["lease_token"],
                          "outcome": outcome, "result": {"balance": 1},
                          **({} if cost is None else {"cost": cost})}
            if outcome == "failed":  # final: once the workers stop, nothing would retry it
                body["error"] = {"message": "site down", "retryable": False}
            report(bank, http, f"/v1/queries/{item['query_id']}/result",
                   item["query_id"], body)


# ---- the operator and the books --------------------------------------------------------

def drain(bank: Bank, admin: httpx.Client, rng: random.Random) -> None:
    """Until every job is terminal: reclaim stale tasks (a worker's claim was cut by a
    crash after its start), the rest the workers finish."""
    pending = ["tasks?status=queued", "tasks?status=leased", "tasks?status=running",
               "tasks?status=stale", "queries?status=queued", "queries?status=leased"]
    while time.monotonic() < bank.deadline:
        reply = bank.send(admin, "GET", "/v1/tasks?status=stale&limit=500")
        assert reply is not None
        for task in reply.json()["items"]:
            outcome, cost = outcome_and_cost(rng, ("succeeded", "failed"))
            report(bank, admin, f"/v1/tasks/{task['task_id']}/reclaim", task["task_id"],
                   {"action": outcome, "reason": "checked the site",
                    **({} if cost is None else {"cost": cost})})
        left = 0
        for listing in pending:
            counted = bank.send(admin, "GET", f"/v1/{listing}&limit=1")
            assert counted is not None
            left += counted.json()["total"]
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError("the work did not drain in time")


def get_json(admin: httpx.Client, path: str) -> Json:
    reply = admin.get(path)
    assert reply.status_code == 200, reply.text
    body: Json = reply.json()
    return body


def all_pages(admin: httpx.Client, path: str) -> list[Json]:
    items: list[Json] = []
    while True:
        page = get_json(admin, f"{path}?limit=500&offset={len(items)}")
        items += page["items"]
        if len(items) >= page["total"] or not page["items"]:
            return items


def wait_for_no_open_holds(admin: httpx.Client, deadline: float) -> None:
    """Recovery settles lost settles and refunds orphans (past 2.5 s) on its own timer."""
    while get_json(admin, "/v1/ledger/holds?status=open&limit=1")["total"]:
        assert time.monotonic() < deadline, get_json(admin, "/v1/ledger/holds?status=open")
        time.sleep(0.1)


def check_the_books(bank: Bank, admin: httpx.Client) -> None:
    audit = get_json(admin, "/v1/ledger/audit")
    assert audit["ok"], audit
    views = {view.get("task_id") or view["query_id"]: view
             for path in PATHS.values() for view in all_pages(admin, path)}
    charged_total = 0
    for tenant in TENANTS:
        entries = all_pages(admin, f"/v1/ledger/accounts/{tenant}/entries")
        credits = sum(e["amount"] for e in entries if e["kind"] == "credit")
        assert credits == bank.credited[tenant]
        # The journal's view of each job: held once, refunded at most once.
        kinds: dict[str, list[str]] = defaultdict(list)
        net: dict[str, int] = defaultdict(int)
        for e in entries:
            if e["kind"] != "credit":
                kinds[e["ref"]].append(e["kind"])
                net[e["ref"]] += e["amount"]
        for ref, seen in kinds.items():
            assert sorted(seen) in (["hold"], ["hold", "refund"]), (ref, seen)
        mine = {job_id: job for job_id, job in bank.jobs.items() if job.tenant == tenant}
        assert set(kinds) <= set(mine), set(kinds) - set(mine)
        charges = 0
        for job_id, job in mine.items():
            charge = -net.get(job_id, 0)
            view = views.get(job_id)
            if view is None:  # refused (402), or never enqueued: no charge
                assert job.answer != "created", job_id
                assert charge == 0, (job_id, charge)
                continue
            assert job.answer != "refused", job_id
            assert view["status"] in TERMINAL[job.channel], view
            outcome, cost = bank.reports.get(job_id, (view["status"], None))
            assert view["status"] == outcome, (job_id, view["status"], outcome)
            want = charge_for(job.max_cost, outcome, cost)
            assert view["billing"] == {"max_cost": job.max_cost, "charged": want,
                                       "refunded": job.max_cost - want,
                                       "hold_status": "settled"}, (job_id, outcome, cost)
            assert charge == want, (job_id, charge, want)
            charges += charge
        assert get_json(admin, f"/v1/ledger/accounts/{tenant}") == {
            "account": tenant, "available": bank.credited[tenant] - charges, "held": 0,
            "balance": bank.credited[tenant] - charges}
        charged_total += charges
    credited = sum(bank.credited.values())
    balances = {name: get_json(admin, f"/v1/ledger/accounts/{name}")["balance"]
                for name in ("@world", "@holds", "@revenue")}
    assert balances == {"@world": -credited, "@holds": 0, "@revenue": charged_total}
    assert get_json(admin, "/v1/ledger/holds?status=open")["total"] == 0


def test_the_bank_adds_up_across_kill_9(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    served: Served = start(tmp_path / "var", BANK_ENV, collect_output=True, log_level="INFO")
    bank = Bank(served.url, dict(served.keys), time.monotonic() + GIVE_UP_AFTER)
    outputs: list[list[str]] = [served.output]
    try:
        with bank.client("admin") as admin:
            for tenant in TENANTS:
                made = admin.post("/v1/admin/keys", json={"role": "client", "name": tenant,
                                                          "tenant": tenant})
                assert made.status_code == 201, made.text
                bank.keys[tenant] = made.json()["key"]
                bank.credit(admin, tenant, FIRST_CREDIT, f"{tenant}-opening")
            submitters = [threading.Thread(target=submitter,
                                           args=(bank, tenant, random.Random(SEED + i)),
                                           daemon=True)
                          for i, tenant in enumerate(TENANTS)]
            workers = [threading.Thread(target=work, args=(bank, f"w{i}", random.Random(-i)),
                                        daemon=True)
                       for i, work in enumerate((task_worker, task_worker, query_worker,
                                                 query_worker))]
            for thread in submitters + workers:
                thread.start()
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.3, 1.0))
                served.process.kill()
                served.process.wait()
                time.sleep(rng.uniform(0.0, 0.3))
                served = restart(served)  # the start-up audit passed, or it would not serve
                outputs.append(served.output)
            time.sleep(0.3)
            bank.stop_submitting.set()
            for thread in submitters:
                thread.join(timeout=max(0.0, bank.deadline - time.monotonic()))
            drain(bank, admin, rng)
            bank.stop_workers.set()
            for thread in workers:
                thread.join(timeout=max(0.0, bank.deadline - time.monotonic()))
            drain(bank, admin, rng)  # a reclaim may have freed a lane; nothing left after
            wait_for_no_open_holds(admin, bank.deadline)
            assert not bank.surprises, bank.surprises
            check_the_books(bank, admin)
            # It did something (how much depends on the machine's speed).
            answers = Counter(job.answer for job in bank.jobs.values())
            assert answers["created"] >= 15, answers
            assert all(credited > FIRST_CREDIT for credited in bank.credited.values())
    except BaseException:
        for n, output in enumerate(outputs):
            print(f"---- server run {n} ----\n{''.join(output[-60:])}")
        raise
    finally:
        bank.stop_submitting.set()
        bank.stop_workers.set()
        if served.process.poll() is None:
            stop(served)


# ---- a purged job id never takes a new hold ---------------------------------------------

PURGE_EVERY = 600.0
BALANCE: Json = {"site": "shop", "kind": "balance", "params": {"account": "a1"}}


async def test_a_resubmit_after_purge_is_a_replay_and_takes_no_new_hold(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    gw: Gateway = await start_gateway(
        nursery, tmp_path / "leasegate.db",
        settings.replace(task_retention=HOUR, query_retention=HOUR, id_tombstone_retention=DAY,
                         ledger_settled_retention=2 * HOUR, housekeeping_interval=PURGE_EVERY),
        clock)
    for tenant in ("t1", "t2"):
        status, _ = await call(gw, "POST", f"/v1/ledger/accounts/{tenant}/credit", "admin",
                               {"amount": 100, "ref": f"{tenant}-pay"})
        assert status == 200
    order: Json = {**ORDER, "task_id": "order-1", "max_cost": 30}
    query: Json = {**BALANCE, "query_id": "q1", "max_cost": 20}
    status, _ = await call(gw, "POST", "/v1/tasks", "t1", order)
    assert status == 201
    item = await lease_one(gw)
    await start_task(gw, item)
    await finish(gw, item, cost=12)
    status, _ = await call(gw, "POST", "/v1/queries", "t1", query)
    assert status == 201  # never leased: expires, refunded in full

    async def books() -> tuple[Json, Json, Json]:
        accounts = [(await call(gw, "GET", f"/v1/ledger/accounts/{t}", "admin"))[1]
                    for t in ("t1", "t2")]
        _, holds = await call(gw, "GET", "/v1/ledger/holds?limit=500", "admin")
        return accounts[0], accounts[1], holds

    # Purged with its hold row still there (settled), and again after that row went too.
    for wait in (HOUR + 3 * PURGE_EVERY, HOUR):
        await trio.sleep(wait)
        status, gone = await call(gw, "GET", "/v1/tasks/order-1", "t1")
        assert_error(status, gone, 404, 6001)
        before = await books()
        assert before[0]["available"] == 100 - 12 and before[0]["held"] == 0
        for path, body, want in (("/v1/tasks", order, "succeeded"),
                                 ("/v1/queries", query, "expired")):
            status, again = await call(gw, "POST", path, "t1", body)
            assert (status, again["created"], again["status"]) == (200, False, want), again
            # Another max_cost, or another tenant: 6004, never a hold either.
            status, other = await call(gw, "POST", path, "t1", {**body, "max_cost": 7})
            assert_error(status, other, 409, 6004)
            status, other = await call(gw, "POST", path, "t2", body)
            assert_error(status, other, 409, 6004)
        assert await books() == before
    assert before[2]["items"] == []  # the second round ran with the hold rows purged
    status, leased = await call(gw, "POST", "/v1/tasks/lease", "worker",
                                {"worker_id": "w1", "wait_seconds": 0})
    assert leased == {"items": []}
