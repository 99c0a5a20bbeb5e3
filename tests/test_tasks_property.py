"""Random workloads against the real task actor: the at-most-once rules always hold.

A Hypothesis state machine submits tasks on a few lanes (so they collide),
leases them with several workers, starts, renews, reports, cancels, pauses,
reclaims, releases and lets virtual time pass. Each step is one ``trio.run``
under an autojump clock: the actor starts on the shared database at the wall
time where the last step ended, handles the step through its mailbox (its
timers fire at their exact deadlines while time passes), and stops.

After every step, from the database:
- never two tasks in flight (leased, running, stale) on one lane;
- never a task executed under two leases: a second accepted start of a task
  needs an operator's requeue in between (a model log of starts/requeues);
  ``attempts`` equals the number of accepted starts;
- a result is accepted only from the lease that was last started;
- every task is in exactly one known state, with that state's fields set.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from leasegate.actors.runtime.actor import Actor
from leasegate.actors.runtime.mailbox import Ask, Tell
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.actor import open_tasks
from leasegate.actors.tasks.control import ControlAction, ControlTask, ReclaimAction, ReclaimTask
from leasegate.actors.tasks.fenced import RenewTask, StartTask, TaskOutcome, TaskResult
from leasegate.actors.tasks.lease import LeaseTasks, ReleaseTaskLeases
from leasegate.actors.tasks.submit import SubmitTask
from leasegate.actors.tasks.turn import TaskTurn
from leasegate.clock import Clock
from leasegate.errors import LeasegateError
from leasegate.http.server.render import to_json
from leasegate.settings import load
from leasegate.storage import tasks_sql
from leasegate.storage.connection import Database
from leasegate.storage.migrations import migrate
from tests.conftest import EPOCH

TaskActor = Actor[Tasks, TaskTurn]

SITES = ("s1", "s2")
ACCOUNTS = ("a", "b")
WORKERS = ("w1", "w2", "w3")
HARD_TIMEOUT = 1800.0
SETTINGS = load(environ={}, overrides={
    "sqlite_synchronous": "OFF", "task_claim_window": 30, "task_lease_ttl": 120,
    "task_hard_timeout": HARD_TIMEOUT, "task_ttl": 3600, "task_retention": 7200,
})
EXPECTED_ERRORS = {4000, 6001, 6002, 6003}
RECENT = st.integers(0, 2) | st.integers(0, 1000)
FORGE = st.sampled_from(["", "", "worker", "token"])

Action = Callable[[TaskActor], Awaitable[Any]]


class TaskMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.db = Database.open(":memory:", synchronous="OFF", inline=True)
        self.db.run_sync(migrate)
        self.elapsed = 0.0
        self.task_ids: list[str] = []
        self.leases: list[tuple[str, str, str]] = []  # (task_id, worker_id, token), all ever
        # Per task: ("start", token), ("requeue", "") by reclaim, ("paused", "") by result.
        self.history: dict[str, list[tuple[str, str]]] = {}

    def teardown(self) -> None:
        self.db.close()

    # ---- driving the actor ----

    def run(self, action: Action) -> Any:
        """One step: start the actor at the current wall time, act, stop it."""
        async def main() -> Any:
            clock = Clock(EPOCH + self.elapsed)
            actor = open_tasks(self.db, clock, SETTINGS)
            async with trio.open_nursery() as nursery:
                await nursery.start(actor.run)
                try:
                    return await action(actor)
                finally:
                    actor.close()
                    self.elapsed = clock.now() - EPOCH

        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    def ask(self, message: Ask[Tasks, Any] | Tell[Tasks]) -> Any:
        """The reply, or None for an expected refusal (anything else is a bug)."""
        async def action(actor: TaskActor) -> Any:
            try:
                if isinstance(message, Tell):
                    await actor.ref.tell(message)
                    return None
                return to_json(await actor.ref.ask(message))
            except LeasegateError as exc:
                assert exc.code in EXPECTED_ERRORS, exc
                return None

        return self.run(action)

    def pick(self, items: list[Any], index: int) -> Any:
        """Mostly a recent item (small index), sometimes any old one."""
        return items[-1 - index % len(items)]

    def starts_since_requeue(self, task_id: str) -> list[str]:
        tokens: list[str] = []
        for kind, token in self.history.get(task_id, []):
            tokens = [] if kind in ("requeue", "paused") else [*tokens, token]
        return tokens

    def starts_of(self, task_id: str) -> list[str]:
        return [token for kind, token in self.history.get(task_id, []) if kind == "start"]

    # ---- rules ----

    @initialize(lanes=st.lists(st.tuples(st.sampled_from(SITES), st.sampled_from(ACCOUNTS),
                                         st.booleans()), min_size=1, max_size=6))
    def backlog(self, lanes: list[tuple[str, str, bool]]) -> None:
        for site, account, batch in lanes:
            self.submit(site, account, batch, 0, None)

    @rule(site=st.sampled_from(SITES), account=st.sampled_from(ACCOUNTS),
          batch=st.booleans(), priority=st.integers(0, 2),
          delay=st.sampled_from([None, 0.0, 50.0]))
    def submit(self, site: str, account: str, batch: bool, priority: int,
               delay: float | None) -> None:
        task_id = f"t{len(self.task_ids)}"
        not_before = None if delay is None else EPOCH + self.elapsed + delay
        reply = self.ask(SubmitTask("ten", site, "order", {"n": task_id}, task_id, account,
                                    priority, not_before, None, 5 if batch else None))
        assert reply == {"task_id": task_id, "status": "queued", "created": True,
                         "site_paused": False}
        self.task_ids.append(task_id)

    @rule(worker=st.sampled_from(WORKERS),
          sites=st.sampled_from([None, ("s1",), ("s2",), SITES]),
          most=st.integers(1, 3), request_id=st.sampled_from([None, "r1"]))
    def lease(self, worker: str, sites: tuple[str, ...] | None, most: int,
              request_id: str | None) -> None:
        leases = self.ask(LeaseTasks(worker, sites, most, request_id))
        assert leases is not None and len(leases) <= most
        assert len({(g["site"], g["account"]) for g in leases}) == len(leases)
        for got in leases:
            assert sites is None or got["site"] in sites
            assert got["attempt"] == len(self.starts_of(got["task_id"])) + 1
            entry = (got["task_id"], worker, got["lease_token"])
            if entry not in self.leases:
                self.leases.append(entry)

    @rule(worker=st.sampled_from(WORKERS), most=st.integers(1, 2))
    def lease_and_start(self, worker: str, most: int) -> None:
        """A well-behaved worker: lease, then start what it got at once."""
        async def action(actor: TaskActor) -> list[tuple[dict[str, Any], Any]]:
            leases = to_json(await actor.ref.ask(LeaseTasks(worker, None, most)))
            return [(got, to_json(await actor.ref.ask(
                StartTask(got["task_id"], worker, got["lease_token"])))) for got in leases]

        for got, started in self.run(action):
            task_id, token = got["task_id"], got["lease_token"]
            assert started["status"] == "running"
            assert self.starts_since_requeue(task_id) == [], (task_id, self.history[task_id])
            assert got["attempt"] == len(self.starts_of(task_id)) + 1
            self.leases.append((task_id, worker, token))
            self.history.setdefault(task_id, []).append(("start", token))
            event(f"accepted start number {len(self.starts_of(task_id))} of a task")

    def lease_as(self, index: int, forge: str) -> tuple[str, str, str]:
        """A lease handed out earlier, as presented by its worker or by an impostor."""
        task_id, worker, token = self.pick(self.leases, index)
        if forge == "worker":
            worker = "w-impostor"
        elif forge == "token":
            token = "forged-token"
        return task_id, worker, token

    @precondition(lambda self: self.leases)
    @rule(index=RECENT, forge=FORGE)
    def start(self, index: int, forge: str) -> None:
        task_id, worker, token = self.lease_as(index, forge)
        reply = self.ask(StartTask(task_id, worker, token))
        if reply is None:
            return
        assert not forge, reply
        if token in self.starts_of(task_id):
            return  # an identical retry of the accepted start
        # At most once: a second execution needs an operator's requeue in between.
        assert self.starts_since_requeue(task_id) == [], (task_id, self.history[task_id])
        self.history.setdefault(task_id, []).append(("start", token))
        event(f"accepted start number {len(self.starts_of(task_id))} of a task")

    @precondition(lambda self: self.leases)
    @rule(index=RECENT, forge=FORGE, checkpoint=st.booleans())
    def renew(self, index: int, forge: str, checkpoint: bool) -> None:
        task_id, worker, token = self.lease_as(index, forge)
        reply = self.ask(RenewTask(task_id, worker, token, {"at": self.elapsed}
                                   if checkpoint else None))
        if reply is not None:
            assert not forge, reply
            assert self.starts_since_requeue(task_id)[-1:] == [token]

    @precondition(lambda self: self.leases)
    @rule(index=RECENT, forge=FORGE,
          outcome=st.sampled_from(["succeeded", "failed", "canceled", "paused"]))
    def result(self, index: int, forge: str, outcome: TaskOutcome) -> None:
        task_id, worker, token = self.lease_as(index, forge)
        reply = self.ask(TaskResult(task_id, worker, token, outcome, {"ok": True},
                                    progress={"done": 1}))
        if reply is None:
            return
        assert not forge, reply
        event(f"result accepted from {'stale (late)' if reply['late_result'] else 'running'}")
        # Only the lease that was last started may report.
        assert self.starts_of(task_id)[-1:] == [token], (task_id, self.history)
        if outcome == "paused" and self.history[task_id][-1] == ("start", token):
            # A batch task paused at a checkpoint: resuming it is a new execution.
            self.history[task_id].append(("paused", ""))

    @precondition(lambda self: self.leases)
    @rule(index=RECENT)
    def release(self, index: int) -> None:
        task_id, _worker, token = self.pick(self.leases, index)
        self.ask(ReleaseTaskLeases(((task_id, token),)))

    @precondition(lambda self: self.task_ids)
    @rule(index=RECENT,
          control=st.sampled_from(["cancel", "pause", "resume", "resume"]))
    def control(self, index: int, control: ControlAction) -> None:
        self.ask(ControlTask(self.pick(self.task_ids, index), control))

    @precondition(lambda self: self.task_ids)
    @rule(index=RECENT,
          action=st.sampled_from(["requeue", "requeue", "requeue", "succeeded", "failed"]))
    def reclaim(self, index: int, action: ReclaimAction) -> None:
        # An operator reclaims what is stale (and sometimes something that is not).
        stale = [row[0] for row in self.db.run_sync(lambda c: c.execute(
            "SELECT task_id FROM tasks WHERE status = 'stale' ORDER BY task_id").fetchall())]
        task_id = self.pick(stale if stale and index % 8 else self.task_ids, index)
        reply = self.ask(ReclaimTask(task_id, action, "operator checked", "admin"))
        if reply is not None:
            event(f"reclaimed: {action}")
            if action == "requeue":
                self.history.setdefault(task_id, []).append(("requeue", ""))

    @rule(seconds=st.sampled_from([1.0, 10.0, 29.0, 30.0, 31.0, 60.0, 119.0, 120.0, 121.0,
                                   600.0, HARD_TIMEOUT]))
    def wait(self, seconds: float) -> None:
        async def action(actor: TaskActor) -> None:
            await trio.sleep(seconds)
            await trio.testing.wait_all_tasks_blocked()  # deadlines tied with the end

        self.run(action)

    # ---- invariants ----

    @invariant()
    def one_in_flight_per_lane(self) -> None:
        crowded = self.db.run_sync(lambda c: c.execute(
            "SELECT site, account, count(*) FROM tasks "
            "WHERE status IN ('leased', 'running', 'stale') "
            "GROUP BY site, account HAVING count(*) > 1").fetchall())
        assert crowded == []

    @invariant()
    def every_task_in_one_consistent_state(self) -> None:
        now = EPOCH + self.elapsed
        rows = self.db.run_sync(lambda c: c.execute("SELECT * FROM tasks").fetchall())
        for row in rows:
            status = row["status"]
            event(f"a task was {status} after a step")
            assert status in tasks_sql.STATES
            assert row["attempts"] == len(self.starts_of(row["task_id"])), dict(row)
            if status in ("leased", "running", "stale"):
                assert row["lease_owner"] is not None and row["lease_token"] is not None
            if status == "queued":
                assert row["lease_token"] is None and row["expires_at"] > now
            elif status == "leased":
                assert row["claim_expires_at"] > now
            elif status == "running":
                assert row["lease_expires_at"] > now
                assert row["started_at"] + HARD_TIMEOUT > now
                # The running lease is the one last started, after any requeue.
                assert self.starts_since_requeue(row["task_id"]) == [row["lease_token"]]
            elif status == "stale":
                assert row["stale_reason"] is not None
                assert self.starts_since_requeue(row["task_id"]) == [row["lease_token"]]
            elif status == "paused":
                assert row["batch_total"] is not None and row["completed_at"] is None
            else:
                assert status in tasks_sql.TERMINAL and row["completed_at"] is not None


# Workloads per run: 50 in the suite (the file alone: 7.5 s; 13 s with 150, 30 s in the
# loaded suite); PYTEST_TASKS_PROPERTY_EXAMPLES=150 (or more) for the long run.
EXAMPLES = int(os.environ.get("PYTEST_TASKS_PROPERTY_EXAMPLES", "50"))

TaskMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_task_state_machine = TaskMachine.TestCase
