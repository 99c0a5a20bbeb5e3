"""Random workloads against the whole system: money and orders are never doubled.

A Hypothesis state machine credits two tenants, submits tasks and queries with
and without ``max_cost`` (new ids, and old ids again: replays, other payloads,
other tenants, ids of purged jobs), leases, starts and finishes them with random
outcomes and costs, cancels, lets leases go stale and reclaims them, lets hours
pass (expiry, retention purges, orphan age, recovery) and crashes: the running
system is torn down at a random point of the submit saga (after the hold,
after the enqueue, before the release of a refused submit) or right after a
terminal state whose settle notice is lost, and a new system starts on the
same database file.

The system runs in a trio loop of its own thread (a ``MockClock``), so it lives
across steps like a real process; each step runs in it with the clock on
autojump, and time stands still between steps.

After every step, from the database file:
- the audit passes (balances sum to zero, ``@holds`` equals the open holds,
  cached balances equal the journal, settled holds charged + refunded in full);
- the journal of every job id reads hold, then release (refund in full) or one
  settlement (charge + refund = hold), never anything after a settlement;
- per tenant: credited − charged == available + held, nothing below zero;
- every job with ``max_cost`` has its own hold: open while the job is live,
  settled with the job's outcome and the charge its outcome and cost call for;
  a hold whose job is another's (a refused submit) is never charged;
- no task is started twice (no requeue here), a known id is never created
  again, and recovery leaves no lost settle or old orphan behind.

The two plain tests at the end replay what the machine found: a retry after
an orphan refund ran the job without a hold, and a refused submit's hold
whose release was lost got charged for another job's outcome.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import trio
import trio.testing
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from leasegate.actors.jobs import Jobs
from leasegate.actors.ledger.accounts import Credit
from leasegate.actors.ledger.audit import audit
from leasegate.actors.ledger.holds import PlaceHold, ReleaseHold, charge_for
from leasegate.actors.queries.lease import LeaseQueries
from leasegate.actors.queries.results import QueryOutcome, QueryResult
from leasegate.actors.queries.submit import SubmitQuery
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.control import ControlTask, ReclaimAction, ReclaimTask
from leasegate.actors.tasks.fenced import StartTask, TaskOutcome, TaskResult
from leasegate.actors.tasks.lease import LeaseTasks
from leasegate.actors.tasks.submit import SubmitTask
from leasegate.clock import Clock
from leasegate.errors import LeasegateError
from leasegate.settings import HOUR, load
from leasegate.storage import queries_sql, tasks_sql
from leasegate.system import System, new_system
from tests.conftest import EPOCH

TENANTS = ("t1", "t2")
RECOVER_EVERY = 60.0
ORPHAN_AGE = HOUR
SETTINGS = load(environ={}, overrides={
    "sqlite_synchronous": "OFF", "unsafe_durability": True,
    "task_claim_window": 30, "task_lease_ttl": 120,
    "task_hard_timeout": 1800, "task_ttl": 3 * HOUR, "task_retention": 2 * HOUR,
    "query_ttl": 900, "query_lease_ttl": 60, "query_retention": 2 * HOUR,
    "housekeeping_interval": 600, "ledger_recover_interval": RECOVER_EVERY,
    "ledger_orphan_max_age": ORPHAN_AGE,
    # Longer than the jobs' retention: a job's hold outlives its row.
    "ledger_settled_retention": 3 * HOUR, "ledger_audit_interval": 24 * HOUR,
    # No key is revoked here: a look every half second would be most of the run's turns.
    "key_revocation_poll_interval": 24 * HOUR,
})
SUBMIT_ERRORS = {6004, 6007}
WORK_ERRORS = {6001, 6002, 6003, 6005, 6006}
COSTS = st.none() | st.integers(0, 60)
# Mostly affordable; the last is always short (402).
MAX_COSTS = st.none() | st.integers(0, 40) | st.integers(0, 40) | st.just(10_000)
RECENT = st.integers(0, 3) | st.integers(0, 1000)

T = TypeVar("T")


def note(text: str) -> None:
    """A Hypothesis event (statistics); nothing when a rule is called by a plain test."""
    with contextlib.suppress(InvalidArgument):
        event(text)


class Crash(Exception):
    """The process dies here: the caller sees no reply, the system is torn down."""


class Dying:
    """A mailbox that dies at one point: before or after a message of one type is
    delivered (and committed). Everything else goes through."""

    def __init__(self, mailbox: Any, kind: type[Any], after: bool) -> None:
        self.mailbox, self.kind, self.after = mailbox, kind, after

    async def ask(self, message: Any) -> Any:
        if not isinstance(message, self.kind):
            return await self.mailbox.ask(message)
        if self.after:
            await self.mailbox.ask(message)
        raise Crash(f"crash {'after' if self.after else 'before'} {self.kind.__name__}")


class Host:
    """A trio loop in a thread of its own, running one system at a time on ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mock = trio.testing.MockClock(autojump_threshold=math.inf)
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main_thread, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self.error is not None:
            raise self.error

    def _main_thread(self) -> None:
        try:
            trio.run(self._main, clock=self.mock)
        except BaseException as exc:  # reported by the next call
            self.error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.clock = Clock(EPOCH)
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            await self._boot()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    async def _boot(self) -> None:
        self.booted_at = self.now()  # the ledger counts an orphan's age from here at most
        system = new_system(self.path, SETTINGS, clock=self.clock, inline_storage=True)
        scope = trio.CancelScope()
        done = trio.Event()

        async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await system.run(task_status=task_status)
            finally:
                done.set()

        await self.nursery.start(run)
        self.system, self._scope, self._done = system, scope, done

    async def crash(self) -> None:
        """Tear the system down where it stands (what is in inboxes is lost) and boot
        a new one on the same file."""
        self._scope.cancel()
        await self._stopped()
        await self._boot()

    async def restart(self) -> None:
        """A clean shutdown (inboxes applied), then a new system."""
        self.system.close()
        await self._stopped()
        await self._boot()

    async def _stopped(self) -> None:
        # The databases are closed on worker threads: with autojump at 0 the event loop
        # would spin while it waits for them, starving them of the GIL.
        threshold, self.mock.autojump_threshold = self.mock.autojump_threshold, math.inf
        try:
            await self._done.wait()
        finally:
            self.mock.autojump_threshold = threshold

    def now(self) -> float:
        return EPOCH + self.mock.current_time()

    def call(self, fn: Callable[[System], Awaitable[T]]) -> T:
        """One step: time runs (autojump) until ``fn`` is done and everything idles."""
        async def step() -> T:
            self.mock.autojump_threshold = 0
            try:
                return await fn(self.system)
            finally:
                await trio.testing.wait_all_tasks_blocked()
                self.mock.autojump_threshold = math.inf

        try:
            return trio.from_thread.run(step, trio_token=self.token)
        except trio.RunFinishedError:
            raise AssertionError(f"the system died: {self.error!r}") from self.error

    def close(self) -> None:
        if self.error is None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
        self._thread.join()


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # In memory where the OS offers it: a crash reopens the file, and a disk's
        # latency spikes would be most of the run time.
        shm = Path("/dev/shm")
        self.dir = Path(tempfile.mkdtemp(prefix="ledger-property-",
                                         dir=shm if shm.is_dir() else None))
        self.host = Host(self.dir / "leasegate.db")
        self.conn = sqlite3.connect(self.dir / "leasegate.db", isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.credits: dict[str, tuple[str, int]] = {}  # ref -> (tenant, amount)
        # Every submit ever sent, by id: (tenant, max_cost, variant of the params).
        self.tasks: dict[str, tuple[str, int | None, int]] = {}
        self.queries: dict[str, tuple[str, int | None, int]] = {}
        self.leases: list[tuple[str, str]] = []  # (task_id, lease token), started
        self.started: set[str] = set()
        self.ever_created: set[str] = set()

    def teardown(self) -> None:
        self.conn.close()
        self.host.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- driving ----

    def ask_tasks(self, message: Ask[Tasks, T]) -> T | None:
        """The reply, or None for an expected refusal (anything else is a bug)."""
        async def action(system: System) -> T | None:
            try:
                return await system.tasks.ask(message)
            except LeasegateError as exc:
                assert exc.code in WORK_ERRORS, exc
                return None

        return self.host.call(action)

    def rows(self, query: str, *args: Any) -> list[sqlite3.Row]:
        return self.conn.execute(query, args).fetchall()

    def available(self, tenant: str) -> int:
        found = self.rows("SELECT balance FROM ledger_accounts WHERE account = ?", tenant)
        return int(found[0][0]) if found else 0

    def pick(self, items: list[T], index: int) -> T:
        return items[-1 - index % len(items)]

    # ---- credits ----

    @initialize(amounts=st.tuples(st.integers(0, 300), st.integers(0, 300)))
    def opening_credits(self, amounts: tuple[int, int]) -> None:
        for tenant, amount in zip(TENANTS, amounts, strict=True):
            if amount:
                self.credit(tenant, amount, f"opening-{tenant}")

    @rule(tenant=st.sampled_from(TENANTS), amount=st.integers(1, 80),
          ref=st.integers(0, 30).map(lambda n: f"pay-{n}"))
    def credit(self, tenant: str, amount: int, ref: str) -> None:
        async def action(system: System) -> Any:
            try:
                return await system.ledger.ask(Credit(tenant, amount, ref))
            except LeasegateError as exc:
                return exc

        before = self.credits.get(ref)
        reply = self.host.call(action)
        if before is None:
            assert not isinstance(reply, LeasegateError), reply
            self.credits[ref] = (tenant, amount)
        elif before == (tenant, amount):
            assert not isinstance(reply, LeasegateError), reply  # a retry: nothing moves
        else:
            assert isinstance(reply, LeasegateError) and reply.code == 6004, reply

    # ---- the submit saga, with crashes ----

    def submit(self, channel: str, job_id: str, tenant: str, max_cost: int | None,
               variant: int, crash: str) -> None:
        jobs = self.tasks if channel == "task" else self.queries
        jobs.setdefault(job_id, (tenant, max_cost, variant))
        known = job_id in self.ever_created
        before = self.available(tenant)

        async def action(system: System) -> Any:
            ledger: Any = system.ledger
            queue: Any = system.tasks if channel == "task" else system.queries
            if crash == "after hold":
                ledger = Dying(ledger, PlaceHold, after=True)
            elif crash == "before release":
                ledger = Dying(ledger, ReleaseHold, after=False)
            elif crash == "after enqueue":
                queue = Dying(queue, SubmitTask if channel == "task" else SubmitQuery,
                              after=True)
            # The facade of the system, with a queue or the ledger that dies.
            jobs = Jobs(tasks=queue, queries=queue, ledger=ledger, max_wait=0)
            try:
                if channel == "task":
                    return await jobs.tasks.submit(
                        SubmitTask(tenant, "shop", "order", {"v": variant}, job_id,
                                   account=job_id, max_cost=max_cost))
                return await jobs.queries.submit(
                    SubmitQuery(tenant, "shop", "balance", {"v": variant}, job_id,
                                max_cost=max_cost))
            except LeasegateError as exc:
                assert exc.code in SUBMIT_ERRORS, exc
                return exc
            except Crash as exc:
                await self.host.crash()
                return exc

        reply = self.host.call(action)
        if isinstance(reply, Crash):
            note(str(reply))
            return
        if isinstance(reply, LeasegateError):
            note(f"submit refused: {reply.code}")
            # Refused: nothing enqueued, and no money stays held for it.
            assert self.available(tenant) == before, (job_id, reply)
            if not known:
                table, key = ("tasks", "task_id") if channel == "task" else ("queries",
                                                                             "query_id")
                assert self.rows(f"SELECT 1 FROM {table} WHERE {key} = ?", job_id) == []
            return
        purged = self.rows(f"SELECT 1 FROM {channel}_tombstones WHERE {channel}_id = ?",
                           job_id)
        note(f"submit answered created={reply.created}{' from a tombstone' if purged else ''}")
        if reply.created:
            assert not known, f"{job_id} was created a second time"
            self.ever_created.add(job_id)
        else:
            assert self.available(tenant) == before, "a replay moved money"

    @rule(channel=st.sampled_from(["task", "task", "query"]), tenant=st.sampled_from(TENANTS),
          max_cost=MAX_COSTS,
          crash=st.sampled_from(["", "", "", "after hold", "after enqueue"]))
    def submit_new(self, channel: str, tenant: str, max_cost: int | None, crash: str) -> None:
        jobs = self.tasks if channel == "task" else self.queries
        job_id = f"{channel}-{len(jobs)}"
        self.submit(channel, job_id, tenant, max_cost, 0, crash)

    @precondition(lambda self: self.tasks or self.queries)
    @rule(channel=st.sampled_from(["task", "task", "query"]), index=RECENT,
          change=st.sampled_from(["none", "none", "params", "max_cost", "tenant"]),
          max_cost=MAX_COSTS,
          crash=st.sampled_from(["", "", "after hold", "before release", "before release"]))
    def resubmit(self, channel: str, index: int, change: str, max_cost: int | None,
                 crash: str) -> None:
        """A retry of an old id: the same payload (a replay, or the honest retry after a
        crash), or another one (6004; its hold, if any was placed, released)."""
        jobs = self.tasks if channel == "task" else self.queries
        if not jobs:
            return
        job_id = self.pick(sorted(jobs), index)
        tenant, cost, variant = jobs[job_id]
        if change == "params":
            variant += 1
        elif change == "max_cost":
            cost = max_cost
        elif change == "tenant":
            tenant = "t2" if tenant == "t1" else "t1"
        self.submit(channel, job_id, tenant, cost, variant, crash)

    # ---- work ----

    @rule(how=st.sampled_from(["lease", "start", "finish", "finish", "finish"]),
          outcome=st.sampled_from(["succeeded", "succeeded", "failed", "canceled"]),
          cost=COSTS, lose_settle=st.booleans())
    def work_task(self, how: str, outcome: TaskOutcome, cost: int | None,
                  lose_settle: bool) -> None:
        """A worker leases a task, and starts it, and reports (or stops on the way)."""
        async def action(system: System) -> list[tuple[str, str]]:
            leases = await system.tasks.ask(LeaseTasks("w1", None, 1))
            if how != "lease":
                for got in leases:
                    await system.tasks.ask(StartTask(got.task_id, "w1", got.lease_token))
            return [(got.task_id, got.lease_token) for got in leases]

        for task_id, token in self.host.call(action):
            if how != "lease":
                assert task_id not in self.started, f"task {task_id} started twice"
                self.started.add(task_id)
                self.leases.append((task_id, token))
                if how == "finish":
                    self.result(0, outcome, cost, lose_settle)

    @precondition(lambda self: self.leases)
    @rule(index=RECENT, outcome=st.sampled_from(["succeeded", "succeeded", "failed",
                                                 "canceled"]),
          cost=COSTS, lose_settle=st.booleans())
    def result(self, index: int, outcome: TaskOutcome, cost: int | None,
               lose_settle: bool) -> None:
        """A worker reports; sometimes the process dies right after the commit, before
        the settle notice reaches the ledger."""
        task_id, token = self.pick(self.leases, index)

        async def action(system: System) -> object:
            settle = system.task_actor.turn.settle
            ledger = settle.ledger
            if lose_settle:
                settle.ledger = None
            try:
                return await system.tasks.ask(
                    TaskResult(task_id, "w1", token, outcome, {"ok": True}, cost=cost))
            except LeasegateError as exc:
                assert exc.code in WORK_ERRORS, exc
                return None
            finally:
                settle.ledger = ledger
                if lose_settle:
                    await self.host.crash()

        if self.host.call(action) is not None:
            note(f"task result accepted{', settle lost' if lose_settle else ''}")

    @precondition(lambda self: self.tasks)
    @rule(index=RECENT)
    def cancel(self, index: int) -> None:
        self.ask_tasks(ControlTask(self.pick(sorted(self.tasks), index), "cancel"))

    @rule(action=st.sampled_from(["succeeded", "failed"]), cost=COSTS)
    def reclaim_stale(self, action: ReclaimAction, cost: int | None) -> None:
        stale = self.rows("SELECT task_id FROM tasks WHERE status = 'stale' ORDER BY task_id")
        if not stale:
            return
        reply = self.ask_tasks(ReclaimTask(stale[0][0], action, "operator checked", "admin",
                                           cost=cost))
        assert reply is not None
        note("a stale task reclaimed")

    @rule(outcome=st.sampled_from(["succeeded", "failed"]), cost=COSTS, report=st.booleans(),
          lose_settle=st.booleans())
    def work_query(self, outcome: QueryOutcome, cost: int | None, report: bool,
                   lose_settle: bool) -> None:
        async def action(system: System) -> None:
            leases = await system.queries.ask(LeaseQueries("q1", None, 1))
            if not leases or not report:
                return
            settle = system.query_actor.turn.settle
            ledger = settle.ledger
            if lose_settle:
                settle.ledger = None
            try:
                await system.queries.ask(QueryResult(
                    leases[0].query_id, "q1", leases[0].lease_token, outcome, {"n": 1},
                    cost=cost))
            finally:
                settle.ledger = ledger
                if lose_settle:
                    await self.host.crash()

        self.host.call(action)

    # ---- time, crashes, recovery ----

    @rule(seconds=st.sampled_from([1.0, 31.0, 61.0, 121.0, 600.0, 1801.0, ORPHAN_AGE + 61,
                                   2 * HOUR + 601]))
    def wait(self, seconds: float) -> None:
        async def action(system: System) -> None:
            await trio.sleep(seconds)

        self.host.call(action)

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        async def action(system: System) -> None:
            await (self.host.restart() if clean else self.host.crash())

        self.host.call(action)

    @rule()
    def recover(self) -> None:
        """A recovery run leaves no lost settle and no old orphan behind (an orphan: a
        hold whose job never came, or whose job is not its own)."""
        before = self.host.now()

        async def action(system: System) -> None:
            await trio.sleep(RECOVER_EVERY + 1)

        self.host.call(action)
        # An orphan waits ORPHAN_AGE after a (re)start too: its caller's window to retry.
        orphan_cut = (before - ORPHAN_AGE if before - ORPHAN_AGE >= self.host.booted_at
                      else -math.inf)
        for channel, table, key in (("task", "tasks", "task_id"),
                                    ("query", "queries", "query_id")):
            own = (f"(j.{key} IS NOT NULL AND j.tenant = h.account "
                   f"AND j.max_cost IS h.amount)")
            left = self.rows(
                f"SELECT h.job_id, j.status FROM ledger_holds h "
                f"LEFT JOIN {table} j ON j.{key} = h.job_id "
                f"WHERE h.channel = ? AND h.status = 'open' AND "
                f"((NOT {own} AND h.created_at < ?) OR ({own} AND j.completed_at < ?))",
                channel, orphan_cut, before)
            assert left == [], [dict(r) for r in left]

    # ---- invariants ----

    @invariant()
    def books_balance(self) -> None:
        report = audit(self.conn)
        assert report.ok, report.failing()

    @invariant()
    def money_is_conserved_and_each_hold_resolved_once(self) -> None:
        txns: dict[int, tuple[str, str, str | None, list[tuple[str, int]]]] = {}
        for row in self.rows("SELECT t.txn_id, t.kind, t.ref, t.memo, l.account, l.amount "
                             "FROM ledger_txns t JOIN ledger_lines l USING (txn_id) "
                             "ORDER BY t.txn_id, l.rowid"):
            txns.setdefault(row["txn_id"], (row["kind"], row["ref"], row["memo"], []))[3] \
                .append((row["account"], row["amount"]))
        credited = dict.fromkeys(TENANTS, 0)
        charged = dict.fromkeys(TENANTS, 0)
        held = dict.fromkeys(TENANTS, 0)
        # Per job id: None, ("open", tenant, amount, charged so far) or "settled".
        state: dict[str, Any] = {}
        for txn_id, (kind, ref, memo, lines) in txns.items():
            tenant_lines = [(a, n) for a, n in lines if not a.startswith("@")]
            where = (txn_id, kind, ref, memo, lines, state.get(ref))
            if kind == "credit":
                [(tenant, amount)] = tenant_lines
                assert self.credits[ref] == (tenant, amount), where
                credited[tenant] += amount
                continue
            now = state.get(ref)
            assert now != "settled", f"a settled hold moved again: {where}"
            if kind == "hold":
                assert now is None, f"held twice: {where}"
                [(tenant, amount)] = tenant_lines
                state[ref] = ("open", tenant, -amount, 0)
                continue
            assert now is not None, f"{kind} without a hold: {where}"
            _, tenant, amount, charge = now
            if kind == "charge":
                assert charge == 0 and tenant_lines == [], where
                [(_, charge)] = [(a, n) for a, n in lines if a == "@revenue"]
                assert 0 < charge <= amount, where
                charged[tenant] += charge
                state[ref] = "settled" if charge == amount else ("open", tenant, amount, charge)
            else:
                assert kind == "refund", where
                assert tenant_lines == [(tenant, amount - charge)], f"charge + refund: {where}"
                released = memo is not None and memo.startswith("released")
                assert not released or charge == 0, where
                state[ref] = None if released else "settled"
        for ref, now in state.items():
            if isinstance(now, tuple):
                assert now[3] == 0, f"charged without the rest refunded: {ref} {now}"
                held[now[1]] += now[2]
        expected = dict.fromkeys(TENANTS, 0)
        for tenant, amount in self.credits.values():
            expected[tenant] += amount
        assert credited == expected
        for tenant in TENANTS:
            found = self.rows("SELECT balance, held FROM ledger_accounts WHERE account = ?",
                              tenant)
            available, on_hold = (found[0][0], found[0][1]) if found else (0, 0)
            assert available >= 0 and on_hold >= 0, (tenant, available, on_hold)
            assert on_hold == held[tenant], (tenant, on_hold, held)
            assert credited[tenant] - charged[tenant] == available + on_hold, (
                tenant, credited, charged, available, on_hold)

    @invariant()
    def every_job_with_max_cost_is_billed_by_its_own_hold(self) -> None:
        for channel, table, key, terminal in (
                ("task", "tasks", "task_id", tasks_sql.TERMINAL),
                ("query", "queries", "query_id", queries_sql.TERMINAL)):
            jobs = {r[key]: r for r in self.rows(
                f"SELECT {key}, tenant, max_cost, status, cost FROM {table}")}
            self.ever_created.update(jobs)
            self.ever_created.update(r[0] for r in self.rows(
                f"SELECT {key} FROM {channel}_tombstones"))
            holds = {r["job_id"]: r for r in self.rows(
                "SELECT * FROM ledger_holds WHERE channel = ?", channel)}
            for job_id, job in jobs.items():
                if job["max_cost"] is None:
                    continue
                hold = holds.get(job_id)
                assert hold is not None, f"{channel} {job_id} with max_cost has no hold"
                assert (hold["account"], hold["amount"]) == (job["tenant"], job["max_cost"])
                if job["status"] not in terminal:
                    assert hold["status"] == "open", (dict(job), dict(hold))
                elif hold["status"] == "settled":
                    assert hold["outcome"] == job["status"], (dict(job), dict(hold))
                    assert hold["charged"] == charge_for(hold["amount"], job["status"],
                                                         job["cost"]), (dict(job), dict(hold))
            for job_id, held in holds.items():
                note(f"a {channel} hold {held['status']} {held['outcome'] or ''}")
                other = jobs.get(job_id)
                if other is not None and (other["tenant"], other["max_cost"]) != (
                        held["account"], held["amount"]):
                    # Another's job (this hold's submit was refused): never charged for it.
                    assert held["status"] == "open" or held["charged"] == 0, (
                        dict(other), dict(held))


LedgerMachine.TestCase.settings = settings(
    max_examples=20, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_ledger_state_machine = LedgerMachine.TestCase


def replay(*steps: Callable[[LedgerMachine], object]) -> None:
    """Run fixed steps of the machine, checking every invariant after each."""
    machine = LedgerMachine()
    try:
        for step in steps:
            step(machine)
            machine.books_balance()
            machine.money_is_conserved_and_each_hold_resolved_once()
            machine.every_job_with_max_cost_is_billed_by_its_own_hold()
    finally:
        machine.teardown()


def test_a_retry_after_an_orphan_refund_never_runs_the_job_without_its_hold() -> None:
    replay(lambda m: m.credit("t1", 50, "pay-0"),
           lambda m: m.submit_new("task", "t1", 20, "after hold"),
           lambda m: m.wait(ORPHAN_AGE + 61),
           lambda m: m.recover(),
           lambda m: m.resubmit("task", 0, "none", None, ""),  # 6004: no free job
           lambda m: m.work_task("start", "succeeded", None, False),
           lambda m: assert_no_job(m, "task-0"))


def assert_no_job(machine: LedgerMachine, task_id: str) -> None:
    assert machine.rows("SELECT 1 FROM tasks WHERE task_id = ?", task_id) == []
    assert machine.started == set()


def test_a_refused_resubmit_that_crashed_before_its_release_is_never_charged() -> None:
    replay(lambda m: m.credit("t1", 50, "pay-0"),
           lambda m: m.submit_new("task", "t1", None, ""),
           lambda m: m.resubmit("task", 0, "max_cost", 20, "before release"),
           lambda m: m.work_task("finish", "succeeded", None, False),
           lambda m: m.recover())
