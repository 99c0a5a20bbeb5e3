"""The actor runtime: one trio task that owns its state and tables, group commit.

An :class:`Actor` serves its inbox. Each turn it takes every message already
waiting (up to ``batch_limit``), applies them in one transaction with a
savepoint per message (each by the handler registered for its type, see
:mod:`leasegate.actors.runtime.handlers`), runs the periodic jobs that are due
in the same transaction, commits once, and only then replies to all (durable
before acknowledged; one commit for the group). On SQLite's commit pipeline
(:mod:`leasegate.storage.wal_sync`) the commit returns before its WAL sync: the
actor applies its next turn meanwhile and answers each turn, in order, between
two turns once its sync has returned::

    inbox = Inbox(Keys)
    keys = Actor("keys", inbox, db, clock, KeysTurn(...), KEYS)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keys.run)
        view = await inbox.ref.ask(RevokeKey("k1"))

Long-polls wait inside the actor: a handler registered with ``may_wait`` returns
``NOT_YET``, and the runtime offers the message to its ``serve`` inside each later
transaction that calls ``turn.work_may_be_available`` with one of its topics
(see :mod:`leasegate.actors.runtime.waiters`). A reply that cannot be delivered
(the caller is gone) is handed to its ``give_back``, which may schedule
compensating work (e.g. releasing a lease nobody received).

A message that breaks a rule is a domain error (its :meth:`~Message.check`
or the handler raises a :class:`LeasegateError`); an unexpected exception
while handling one message rolls back that message alone and answers its
caller 500 (logged once, with the request id); the actor goes on.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import outcome
import trio

from leasegate.actors.runtime.applied import Served, TurnBatch, polled, run_job
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.mailbox import TIMED_OUT, Envelope, Message, Ref, Tell
from leasegate.actors.runtime.periodic import JobRecord, JobStatistics, PeriodicJob
from leasegate.actors.runtime.turn import Turn
from leasegate.actors.runtime.unsynced import SyncReturned, UnsyncedTurns
from leasegate.actors.runtime.waiters import NOT_YET, NOT_YET_OUTCOME, Wait, Waiters, WakesOnly
from leasegate.clock import Clock
from leasegate.errors import InvalidRequest, LeasegateError, Unavailable
from leasegate.logs import Throttled
from leasegate.storage.connection import (
    begin,
    commit,
    is_storage_failure,
    rollback,
    transaction,
)
from leasegate.storage.database import Database
from leasegate.storage.engine import Connection, dialect
from leasegate.storage.turn_locks import lock_scopes

A = TypeVar("A")
C = TypeVar("C", bound=Turn)
log = logging.getLogger("leasegate.actors")

BATCH_LIMIT: Final = 256
STORAGE_RETRY_DELAY: Final = 1.0
CATCH_UP_DELAY: Final = 1.0


@dataclass(frozen=True)
class ActorStatistics:
    """A snapshot of an actor, taken on the trio thread (for /health, /metrics)."""

    name: str
    waiting: int
    commits: int
    internal_errors: int
    draining: bool
    jobs: tuple[JobStatistics, ...]


class Actor(Generic[A, C]):
    """The actor tagged ``A`` whose handlers take the turn context ``C``.

    Everything that runs inside the transaction runs on the database thread
    while the actor task waits for it, so there is never more than one
    thread touching the actor's state at a time: no locks are needed.
    Counters that others read (jobs, commits, errors) change only on the trio
    thread; readers take :meth:`statistics`.
    """

    def __init__(self, name: str, inbox: Inbox[A], db: Database, clock: Clock, turn: C,
                 handlers: Handlers[A, C], *, error_log_window: float = 600.0,
                 batch_limit: int = BATCH_LIMIT) -> None:
        self.name = name
        self.db = db
        self.clock = clock
        self.turn = turn
        self.error_log_window = error_log_window
        self.batch_limit = batch_limit
        self._behaviour = handlers
        self._handlers = handlers.handlers  # read once per message: a dict lookup
        self._waiting = dict(handlers.waiting)  # its own: a test may wrap a spec
        self._send, self._inbox = inbox.send, inbox.receive
        self._waiters = inbox.waiters
        self.ref = inbox.ref
        self.jobs: list[PeriodicJob[C]] = []
        self._internal: list[Tell[Any]] = []
        self._next_wakeup: float | None = None
        self._retry_at = -math.inf
        self._commits = 0
        self._internal_errors = 0
        self.deadline_poll: float | None = None  # see applied.polled
        self._storage_log = Throttled(log, error_log_window)
        # Called in each turn's transaction just before its commit (several gateways on
        # one database: tells the others what the turn's writes woke; None: nobody).
        self.announce: Callable[[C], None] | None = None
        self._unsynced = UnsyncedTurns(self._answer, self._wake_synced)
        turn.now = clock.now()

    @property
    def draining(self) -> bool:
        return self.turn.draining

    def add_job(self, name: str, every: float,
                run: Callable[[C, float], bool | None]) -> PeriodicJob[C]:
        """Run ``run(turn, now)`` every ``every`` seconds inside a turn (see
        :class:`~leasegate.actors.runtime.periodic.PeriodicJob`)."""
        job = PeriodicJob(JobRecord(name, owner=self.name, every=every), run)
        self.jobs.append(job)
        return job

    def statistics(self) -> ActorStatistics:
        """A snapshot of this actor; call on the trio thread."""
        return ActorStatistics(self.name, len(self._waiters), self._commits,
                               self._internal_errors, self.draining,
                               tuple(job.record.statistics() for job in self.jobs))

    # ---- the loop ---------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the inbox until it is closed (see :meth:`close`).

        An exception outside the handling of one message (the database itself
        failing in a way that is not a passing storage failure, or a bug in a
        deadline handler) propagates and takes the whole system down with it,
        on purpose: the state is durable and a supervisor restarts the process.
        """
        now = self.clock.now()
        for job in self.jobs:
            job.record.next_at = now + job.record.every
        await self._start_up()
        task_status.started()
        while True:
            envelopes = await self._collect()
            if envelopes is None:
                break
            self._unsynced.answer_durable()
            self._expire_waiters()
            # A wake-up only to time waiting polls out needs no turn.
            if envelopes or trio.current_time() >= self._deadline():
                await self._turn(envelopes)
                self._unsynced.answer_durable()
        await self._unsynced.answer_all()
        for env in self._waiters.everyone():  # waiting since the drain turn: not answered yet
            self._waiters.take(env)
            self._reply(env, outcome.Error(Unavailable("the gateway is shutting down")))

    async def _start_up(self) -> None:
        turn, behaviour = self.turn, self._behaviour

        def start(conn: Connection) -> float | None:
            turn.begin(conn, now)
            try:
                with transaction(conn):
                    behaviour.start(turn)
                    return behaviour.next_wakeup(turn)
            finally:
                effects, turn.effects = turn.effects, []
                started.extend(effects)

        started: list[Callable[[], None]] = []
        now = self.clock.now()
        self._next_wakeup = polled(await self.db.run(start), now, self.deadline_poll)
        for effect in started:  # committed: the transaction above did not raise
            effect()

    def _deadline(self) -> float:
        due = [job.record.next_at for job in self.jobs if job.record.next_at is not None]
        if self._next_wakeup is not None:
            due.append(self._next_wakeup)
        if self._internal:
            due.append(-math.inf)
        if not due:
            return math.inf
        # After a storage failure, nothing of our own is retried before
        # _retry_at (callers' messages still are: they fail fast with 503).
        return self.clock.deadline(max(min(due), self._retry_at))

    async def _collect(self) -> list[Envelope[Any]] | None:
        """Wait for messages or the next deadline; None when the inbox is closed."""
        envelopes: list[Envelope[Any]] = []
        with trio.move_on_at(min(self._deadline(), self._waiters.next_deadline())):
            try:
                envelopes.append(await self._inbox.receive())
            except trio.EndOfChannel:
                return None
        while len(envelopes) < self.batch_limit:
            try:
                envelopes.append(self._inbox.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        return [env for env in envelopes if type(env.message) is not SyncReturned]

    def _wakes_nobody(self, envelopes: list[Envelope[Any]], now: float) -> bool:
        """The messages only wake waiting ones (``wakes_only``: another gateway's work),
        none of them waits on what they wake, and nothing of our own is due: no turn.
        (Deadlines another gateway set are met by the actor's deadline poll.)"""
        if self._internal or not all(getattr(env.message, "wakes_only", False)
                                     for env in envelopes):
            return False
        if (self._next_wakeup is not None and now >= self._next_wakeup) or any(
                job.record.next_at is not None and job.record.next_at <= now
                for job in self.jobs):
            return False
        heard = [m for env in envelopes if isinstance(m := env.message, WakesOnly)]
        if any(m.everything for m in heard):
            return not self._waiters.waits_on(None)
        return not self._waiters.waits_on({t for m in heard for t in m.topics})

    async def _turn(self, envelopes: list[Envelope[Any]]) -> None:
        now = self.clock.now()
        if envelopes and self._wakes_nobody(envelopes, now):
            return
        internal, self._internal = self._internal, []
        envelopes = [Envelope[Any](m) for m in internal] + envelopes
        due_jobs = [job for job in self.jobs
                    if job.record.next_at is not None and job.record.next_at <= now]
        batch = TurnBatch(envelopes, due_jobs)
        self._waiters.busy = True  # callers leaving now are unlinked after the turn
        self._unsynced.applying = True
        try:
            wake, synced = await self.db.run_committed(lambda conn: self._apply(conn, batch, now))
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            # At most one line per error_log_window: under load a full disk fails
            # every turn, and each would be a line.
            self._storage_log.warning(now, "%s: storage failure, batch of %d not applied: %s",
                                      self.name, len(envelopes), exc)
            for env in envelopes:  # an Outcome unwraps once: one each
                self._reply(env, outcome.Error(Unavailable(f"storage failure: {exc}")))
            # Retry our own work (deadlines, jobs, compensations) in a second,
            # not in a tight loop against a full disk.
            self._retry_at = now + STORAGE_RETRY_DELAY
            for job in due_jobs:
                job.record.next_at = now + min(job.record.every, STORAGE_RETRY_DELAY)
            self._internal.extend(internal)
            return
        finally:
            self._unsynced.applying = False
            self._waiters.settle()
        self._retry_at = -math.inf
        if batch.wrote > 0:  # a read commits on a full disk too: it proves nothing
            self._storage_log.recovered(f"{self.name}: storage works again")
        self._commits += 1
        self._next_wakeup = polled(wake, now, self.deadline_poll)
        self._committed(batch, now)
        self._unsynced.committed(synced, batch)

    def _wake_synced(self) -> None:
        with contextlib.suppress(trio.WouldBlock, trio.ClosedResourceError,
                                 trio.BrokenResourceError):  # full: a turn comes anyway
            self._send.send_nowait(Envelope[Any](SyncReturned()))

    def _committed(self, batch: TurnBatch, now: float) -> None:
        """After the commit, on the trio thread, before the next turn: jobs' records,
        bugs, and the waiters served (out of the waiters) or kept waiting."""
        for run in batch.job_runs:
            record = run.job.record
            if run.skipped:
                record.ran_elsewhere(run.elsewhere)
            elif run.stack is None:
                record.succeeded(now, more=run.more)
            else:
                record.failed(now, self.error_log_window, run.stack)
            # A job that says it has more to do (a purge behind) runs again soon.
            record.next_at = now + (min(record.every, CATCH_UP_DELAY) if record.more
                                    else record.every)
        for what, request_id, stack in batch.internal_errors:
            self._internal_errors += 1
            log.error("%s: unexpected error handling %s (request %s); it was rolled back "
                      "and answered 500:\n%s", self.name, what, request_id or "-", stack)
        for env, _ in batch.served:
            self._waiters.take(env)
        served = {id(env) for env, _ in batch.served}
        for env, wait in batch.newcomers:
            if id(env) not in served:
                self._waiters.add(env, wait)  # refused if its caller already left

    def _answer(self, batch: TurnBatch) -> None:
        """Once the turn's commit is durable, between turns: its effects, then every
        reply (the effects first: a tell reaches its actor before the caller goes on)."""
        for effect in batch.effects:
            effect()
        for env, result in zip(batch.envelopes, batch.results, strict=True):
            if result is not None and result is not NOT_YET_OUTCOME:
                self._reply(env, result)
        for env, result in batch.served:
            self._reply(env, result)

    def _apply(self, conn: Connection, batch: TurnBatch, now: float) -> float | None:
        turn, behaviour = self.turn, self._behaviour
        begin(conn)
        changes = conn.total_changes
        try:
            self._lock_scopes(conn, batch)
            turn.begin(conn, now)
            turn.bugs = batch.internal_errors
            # Deadlines first, so every message sees the state as of `now`; only
            # when one is due (next_wakeup is exact), not on every turn.
            turn.restart = None
            if self._next_wakeup is not None and now >= self._next_wakeup:
                behaviour.on_wakeup(turn, now)
            elif dialect(conn) == "postgresql":
                turn.restart = lambda: self._restart(conn, batch)
            for env in batch.envelopes:
                result = self._apply_one(env)
                turn.restart = None  # (a message without a handler leaves it)
                batch.results.append(result)
                if result is NOT_YET_OUTCOME:
                    wait = self._waiting[type(env.message)].wait(env.message)
                    batch.newcomers.append((env, wait or Wait(queue=env)))
            turn.restart = None  # no message: nothing after may restart the transaction
            for job in batch.jobs:
                batch.job_runs.append(run_job(turn, job, now))
            self._offer_waiters(batch.served, batch.newcomers)
            wake = behaviour.next_wakeup(turn)
            if self.announce is not None and (turn.announce or turn.announce_all):
                self.announce(turn)
            batch.effects = turn.effects
            commit(conn)
            batch.wrote = conn.total_changes - changes - turn.undone
        except BaseException:
            turn.effects = []
            rollback(conn)
            raise
        return wake

    def _restart(self, conn: Connection, batch: TurnBatch) -> None:
        """Undo the transaction's first message, run without a savepoint: the
        transaction again, with its locks."""
        rollback(conn)
        begin(conn)
        self._lock_scopes(conn, batch)

    def _lock_scopes(self, conn: Connection, batch: TurnBatch) -> None:
        """The narrow locks the turn's messages declare, all at once (see
        ``storage.turn_locks``): no actor-wide lock, on either engine."""
        declared = self._behaviour.scopes
        if not declared:
            return
        scopes: set[str] = set()
        for env in batch.envelopes:
            of = declared.get(type(env.message))
            if of is None:
                continue
            try:
                named = list(of(env.message))
            except Exception:
                # A message whose locks cannot be named (a field of the wrong type) is
                # one its check refuses (400) before it touches a row: it needs none,
                # and it must not stop the actor.
                continue
            scopes.update(named)
        if scopes:
            lock_scopes(conn, scopes)

    def _apply_one(self, env: Envelope[Any]) -> outcome.Outcome[Any] | None:
        message = env.message
        handler = self._handlers.get(type(message))
        if handler is None:
            if type(message) is _Nudge:
                return None
            return outcome.Error(InvalidRequest(
                f"{self.name}: not a {self.name} message: {type(message).__name__}"))
        turn = self.turn
        turn.request_id = env.request_id

        def apply() -> Any:
            message.check()
            return handler(turn, message)

        done = turn.in_savepoint("message", type(message).__name__, apply)
        if isinstance(done, outcome.Error):
            return done
        reply = done.unwrap()
        if reply is NOT_YET:
            if turn.draining:
                return self._drained(message)
            not_yet: outcome.Outcome[Any] = NOT_YET_OUTCOME
            return not_yet
        return outcome.Value(reply) if env.reply is not None else None

    # ---- waiting requests ----------------------------------------------------------

    def _offer_waiters(self, served: Served, newcomers: list[tuple[Envelope[Any], Wait]]) -> None:
        """Offer the work this turn made to the waiters it may serve (all when draining)."""
        turn, waiting = self.turn, self._waiting

        def serve(env: Envelope[Any]) -> bool:
            message = env.message
            if turn.draining:
                served.append((env, self._drained(message)))
                return True
            reply = waiting[type(message)].serve(turn, message)
            if reply is None:
                return False
            served.append((env, outcome.Value(reply)))
            return True

        if turn.draining or turn.wake_all:
            self._waiters.offer(None, serve, newcomers)
        elif turn.wake:
            self._waiters.offer(turn.wake, serve, newcomers)

    def _drained(self, message: Message) -> outcome.Outcome[Any]:
        try:
            return outcome.Value(self._waiting[type(message)].drained(self.turn, message))
        except LeasegateError as exc:
            return outcome.Error(exc)

    def _expire_waiters(self) -> None:
        """Answer :data:`TIMED_OUT` to the waiting envelopes whose deadline has come."""
        for env in self._waiters.expire(trio.current_time()):
            self._reply(env, TIMED_OUT)

    def _reply(self, env: Envelope[Any], result: outcome.Outcome[Any]) -> None:
        """Hand ``result`` over; a caller already gone gets nothing, and a value it
        would have received (a lease) is undone by its ``give_back`` at once."""
        if env.reply is None:
            return
        try:
            env.reply.send_nowait(result)
        except (trio.BrokenResourceError, trio.WouldBlock, trio.ClosedResourceError):
            if isinstance(result, outcome.Value) and result is not TIMED_OUT:
                waiting = self._waiting.get(type(env.message))
                work = None if waiting is None else waiting.give_back(result.value)
                if work is not None:
                    self._internal.append(work)
        finally:
            env.reply.close()

    # ---- shutdown ---------------------------------------------------------------

    def drain(self) -> None:
        """Answer waiting messages with their drained reply at the next turn.

        New messages that would wait get the drained reply at once. Call
        :meth:`close` afterwards to stop the loop once the inbox is empty.
        """
        self.turn.draining = True
        # A full inbox means a turn is coming anyway.
        with contextlib.suppress(trio.WouldBlock, trio.ClosedResourceError,
                                 trio.BrokenResourceError):
            self._send.send_nowait(Envelope[Any](_Nudge()))

    def close(self) -> None:
        """Stop accepting messages; the loop ends after those already queued."""
        self._send.close()


class _Nudge(Tell[Any]):
    """Internal no-op message: makes the actor take a turn now."""


MAILBOX_SIZE: Final = 4096


class Inbox(Generic[A]):
    """The bounded queue of envelopes of the actor tagged ``A``, its waiters,
    and the :class:`Ref` that reaches it.

    Opened before the actor, so that others can hold its ref first: the system opens
    every actor's inbox, hands the refs to whoever tells or asks that actor, and only
    then constructs the actors (no wiring after construction)::

        tasks = Inbox(Tasks)
        ledger = open_ledger(Inbox(Ledger), ..., queues={"task": tasks.ref, ...})
        task_actor = open_tasks(tasks, ..., ledger=ledger.ref)
    """

    def __init__(self, tag: type[A], size: int = MAILBOX_SIZE) -> None:
        self.tag = tag
        self.send, self.receive = trio.open_memory_channel[Envelope[Any]](size)
        self.waiters = Waiters()
        self.ref: Ref[A] = Ref(self.send, self.waiters.leave)
