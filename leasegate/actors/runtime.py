"""The actor runtime: mailbox, ask/reply, group commit, timers, parked waiters.

An :class:`Actor` is one trio task that owns its state and its tables. Others
reach it only through its :class:`Mailbox`. Each turn of its loop it takes
every message already waiting (up to ``batch_limit``), applies them in one
SQLite transaction with a savepoint per message, runs the periodic jobs that
are due in the same transaction, commits once, and only then replies to all
(durable before acknowledged; one commit for the group)::

    class Counter(Actor):
        name = "counter"

        def handle(self, conn, message):          # message: Increment (an Ask[int])
            return counter_sql.increment(conn)   # SQL lives in storage/

    async with trio.open_nursery() as nursery:
        counter = Counter(db, clock)
        nursery.start_soon(counter.run)
        n = await counter.mailbox.ask(Increment())

Long-polls park inside the actor: :meth:`Actor.handle` returns :data:`PARK`,
:meth:`Actor.parked_on` says what the message waits for, and the runtime offers
it to :meth:`Actor.serve_parked` inside each later transaction that calls
:meth:`Actor.work_may_be_available` with one of its topics (see
:mod:`leasegate.actors.parking`). A reply that cannot be delivered (the caller
is gone) is handed to :meth:`Actor.undelivered`, which may schedule
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
import sqlite3
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import outcome
import trio

from leasegate.actors.jobs import JobRecord, JobStatistics
from leasegate.actors.mailbox import Ask, Envelope, Mailbox, Tell
from leasegate.actors.parking import PARK as PARK  # re-exported: actors import it from here
from leasegate.actors.parking import PARK_OUTCOME, Parking, ParkingActor, Wait
from leasegate.clock import Clock
from leasegate.errors import InternalError, LeasegateError, Unavailable
from leasegate.logs import Throttled
from leasegate.storage.connection import (
    Database,
    begin,
    commit,
    is_storage_failure,
    release,
    rollback,
    savepoint,
    transaction,
    undo,
)

R = TypeVar("R")
log = logging.getLogger("leasegate.actors")

MAILBOX_SIZE: Final = 4096
BATCH_LIMIT: Final = 256
STORAGE_RETRY_DELAY: Final = 1.0
CATCH_UP_DELAY: Final = 1.0


@dataclass
class PeriodicJob:
    """A job an actor runs on its own timer, in its own savepoint, inside a turn.

    ``every`` is the interval in seconds; a run that returns True (more to do,
    e.g. a purge that hit its batch size) runs again after about a second. An
    exception rolls back the job's savepoint alone; it is counted and logged
    by its :class:`JobRecord` once the turn is over, and the job runs again
    next time: it never takes the actor down.
    """

    record: JobRecord
    run: Callable[[sqlite3.Connection, float], bool | None]

    @property
    def name(self) -> str:
        return self.record.name


@dataclass(frozen=True)
class ActorStatistics:
    """A snapshot of an actor, taken on the trio thread (for /health, /metrics)."""

    name: str
    parked: int
    commits: int
    internal_errors: int
    draining: bool
    jobs: tuple[JobStatistics, ...]


@dataclass
class _JobRun:
    job: PeriodicJob
    more: bool = False
    stack: str | None = None  # set when the run failed


@dataclass
class _Batch:
    envelopes: list[Envelope[Any]]
    jobs: list[PeriodicJob]
    results: list[outcome.Outcome[Any] | None] = field(default_factory=list)
    served: list[tuple[Envelope[Any], outcome.Outcome[Any]]] = field(default_factory=list)
    newcomers: list[tuple[Envelope[Any], Wait]] = field(default_factory=list)  # parked now
    effects: list[Callable[[], None]] = field(default_factory=list)
    job_runs: list[_JobRun] = field(default_factory=list)
    # (what failed, its request id, the stack): bugs met by one message or batch item
    internal_errors: list[tuple[str, str | None, str]] = field(default_factory=list)
    # Rows the commit wrote (changes undone by a savepoint do not count): only a
    # commit that wrote proves the storage works again after a failure.
    wrote: int = 0


class Actor(ParkingActor):
    """Base class. Subclasses implement :meth:`handle` and may override the hooks.

    Everything that runs inside the transaction runs on the database thread
    while the actor task waits for it, so there is never more than one
    thread touching the actor's state at a time: no locks are needed. Code
    there reads the time from :attr:`now` (fixed on the trio side for the
    whole turn), never from the clock: trio's clock is not readable off its
    thread, and one turn should see one instant. Counters that others read
    (jobs, commits, errors) change only on the trio thread; readers take
    :meth:`statistics`.
    """

    name: str = "actor"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        error_log_window: float = 600.0,
        mailbox_size: int = MAILBOX_SIZE,
        batch_limit: int = BATCH_LIMIT,
    ) -> None:
        self.db = db
        self.clock = clock
        self.error_log_window = error_log_window
        self.batch_limit = batch_limit
        self._send, self._inbox = trio.open_memory_channel[Envelope[Any]](mailbox_size)
        self._parking = Parking()
        self.mailbox = Mailbox(self._send, self._parking.leave)
        self.jobs: list[PeriodicJob] = []
        self._effects: list[Callable[[], None]] = []
        self._bugs: list[tuple[str, str | None, str]] = []  # this turn's; see in_savepoint
        self._request_id: str | None = None  # of the message being applied
        self._internal: list[Tell] = []
        self._next_wakeup: float | None = None
        self._retry_at = -math.inf
        ParkingActor.__init__(self)
        self.draining = False
        self._commits = 0
        self._internal_errors = 0
        self._storage_log = Throttled(log, error_log_window)
        self._undone = 0  # rows this turn's undone savepoints had changed
        self.turn = 0  # counts turns, failed ones too: "within this transaction"
        self.now = clock.now()

    # ---- hooks for subclasses -------------------------------------------------

    def handle(self, conn: sqlite3.Connection, message: Ask[Any] | Tell) -> object:
        """Apply one message inside its savepoint; return the reply or :data:`PARK`.

        Raise a :class:`LeasegateError` to roll back this message alone.
        """
        raise NotImplementedError


    def next_wakeup(self, conn: sqlite3.Connection) -> float | None:
        """The wall time of the next data-driven deadline (e.g. a lease expiry), computed
        at the end of each turn. It must be exact: :meth:`on_wakeup` runs only once it
        has come."""
        return None

    def on_wakeup(self, conn: sqlite3.Connection, now: float) -> None:
        """Handle every data-driven deadline that has passed (at the start of a turn, in
        its transaction, before any message)."""

    def on_start(self, conn: sqlite3.Connection) -> None:
        """Runs once in a transaction before the first message (its ``after_commit``
        effects run once that commits, as a message's do)."""

    # ---- helpers for subclasses ----------------------------------------------

    def after_commit(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` on the trio thread once the current message commits.

        Dropped if the message rolls back or the commit fails.
        """
        self._effects.append(effect)

    def tell_after_commit(self, mailbox: Mailbox, message: Tell, lost: str) -> None:
        """Tell another actor ``message`` once the current message commits, without
        waiting; when its inbox is full (or it closed at shutdown), log ``lost``,
        which says what repairs it."""
        def tell() -> None:
            try:
                mailbox.tell_nowait(message)
            except (trio.WouldBlock, LeasegateError):
                log.warning("%s: %s", self.name, lost)

        self.after_commit(tell)


    def add_job(self, name: str, every: float,
                run: Callable[[sqlite3.Connection, float], bool | None]) -> PeriodicJob:
        job = PeriodicJob(JobRecord(name, owner=self.name, every=every), run)
        self.jobs.append(job)
        return job

    def statistics(self) -> ActorStatistics:
        """A snapshot of this actor; call on the trio thread."""
        return ActorStatistics(self.name, len(self._parking), self._commits,
                               self._internal_errors, self.draining,
                               tuple(job.record.statistics() for job in self.jobs))

    # ---- the loop ---------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the mailbox until it is closed (see :meth:`close`).

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
            self._expire_parked()
            # A wake-up only to time parked polls out needs no turn.
            if envelopes or trio.current_time() >= self._deadline():
                await self._turn(envelopes)
        for env in self._parking.everyone():  # parked after the drain turn: not answered yet
            self._parking.take(env)
            self._reply(env, outcome.Error(Unavailable("the gateway is shutting down")))

    async def _start_up(self) -> None:
        def start(conn: sqlite3.Connection) -> float | None:
            self._effects = []
            try:
                with transaction(conn):
                    self.on_start(conn)
                    return self.next_wakeup(conn)
            finally:
                effects, self._effects = self._effects, []
                started.extend(effects)

        started: list[Callable[[], None]] = []
        self.now = self.clock.now()
        self._next_wakeup = await self.db.run(start)
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
        """Wait for messages or the next deadline; None when the mailbox is closed."""
        envelopes: list[Envelope[Any]] = []
        with trio.move_on_at(min(self._deadline(), self._parking.next_deadline())):
            try:
                envelopes.append(await self._inbox.receive())
            except trio.EndOfChannel:
                return None
        while len(envelopes) < self.batch_limit:
            try:
                envelopes.append(self._inbox.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        return envelopes

    async def _turn(self, envelopes: list[Envelope[Any]]) -> None:
        now = self.now = self.clock.now()
        self.turn += 1
        internal, self._internal = self._internal, []
        envelopes = [Envelope[Any](m) for m in internal] + envelopes
        due_jobs = [job for job in self.jobs
                    if job.record.next_at is not None and job.record.next_at <= now]
        batch = _Batch(envelopes, due_jobs)
        self._parking.busy = True  # callers leaving now are unlinked after the turn
        try:
            wake = await self.db.run(lambda conn: self._apply(conn, batch, now))
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
            self._parking.settle()
        self._retry_at = -math.inf
        if batch.wrote > 0:  # a read commits on a full disk too: it proves nothing
            self._storage_log.recovered(f"{self.name}: storage works again")
        self._commits += 1
        self._next_wakeup = wake
        for run in batch.job_runs:
            record = run.job.record
            if run.stack is None:
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
        for effect in batch.effects:
            effect()
        for env, result in zip(batch.envelopes, batch.results, strict=True):
            if result is not None and result is not PARK_OUTCOME:
                self._reply(env, result)
        for env, result in batch.served:
            self._parking.take(env)
            self._reply(env, result)
        served = {id(env) for env, _ in batch.served}
        for env, wait in batch.newcomers:
            if id(env) not in served:
                self._parking.park(env, wait)  # refused if its caller already left

    def _apply(self, conn: sqlite3.Connection, batch: _Batch, now: float) -> float | None:
        begin(conn)
        changes = conn.total_changes
        self._undone = 0
        try:
            self._effects = []
            self._bugs = batch.internal_errors
            self._new_turn()
            # Deadlines first, so every message sees the state as of `now`; only
            # when one is due (next_wakeup is exact), not on every turn.
            if self._next_wakeup is not None and now >= self._next_wakeup:
                self.on_wakeup(conn, now)
            for env in batch.envelopes:
                result = self._apply_one(conn, env, batch)
                batch.results.append(result)
                if result is PARK_OUTCOME:
                    wait = self.parked_on(env.message) or Wait(queue=env)
                    batch.newcomers.append((env, wait))
            for job in batch.jobs:
                batch.job_runs.append(self._run_job(conn, job, now))
            self._offer_parked(conn, batch.served, batch.newcomers)
            wake = self.next_wakeup(conn)
            batch.effects = self._effects
            commit(conn)
            batch.wrote = conn.total_changes - changes - self._undone
        except BaseException:
            self._effects = []
            rollback(conn)
            raise
        return wake


    def _apply_one(self, conn: sqlite3.Connection, env: Envelope[Any],
                   batch: _Batch) -> outcome.Outcome[Any] | None:
        if isinstance(env.message, _Nudge):
            return None
        self._request_id = env.request_id

        def apply() -> Any:
            env.message.check()
            return self.handle(conn, env.message)

        done = self.in_savepoint(conn, "message", type(env.message).__name__, apply)
        if isinstance(done, outcome.Error):
            return done
        reply = done.unwrap()
        if reply is PARK:
            if self.draining:
                return self._drained(conn, env.message)
            parked: outcome.Outcome[Any] = PARK_OUTCOME
            return parked
        return outcome.Value(reply) if env.reply is not None else None


    def in_savepoint(self, conn: sqlite3.Connection, name: str, what: str,
                     step: Callable[[], R]) -> outcome.Outcome[R]:
        """``step`` in a savepoint of its own: a domain error undoes it and is its
        answer; a bug undoes it, is logged after the turn and answers 500; a storage
        failure fails the whole turn (SQLite may already have rolled it back:
        SQLITE_FULL, IOERR). A message, or one item of a batch message."""
        mark = self._mark(conn)
        savepoint(conn, name)
        try:
            value = step()
        except LeasegateError as exc:
            self._undo(conn, name, mark)
            return outcome.Error(exc)
        except Exception as exc:
            if is_storage_failure(exc):
                raise
            self._undo(conn, name, mark)
            self._bugs.append((what, self._request_id, traceback.format_exc()))
            return outcome.Error(InternalError(
                f"internal error (request {self._request_id or '-'}); see the server log"))
        release(conn, name)
        return outcome.Value(value)

    def _mark(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """What a savepoint made now must restore: (effects, the connection's total
        changes, the changes undone so far)."""
        return len(self._effects), conn.total_changes, self._undone

    def _undo(self, conn: sqlite3.Connection, name: str, mark: tuple[int, int, int]) -> None:
        """Roll back to savepoint ``name``, made at ``mark``; every change since then
        (those of savepoints inside it included) is undone."""
        effects, changes, undone = mark
        undo(conn, name)
        del self._effects[effects:]
        self._undone = undone + conn.total_changes - changes

    def _run_job(self, conn: sqlite3.Connection, job: PeriodicJob, now: float) -> _JobRun:
        mark = self._mark(conn)
        savepoint(conn, "job")
        try:
            more = job.run(conn, now)
        except Exception as exc:
            if is_storage_failure(exc):
                raise  # fails the turn; SQLite may have rolled back already
            self._undo(conn, "job", mark)
            return _JobRun(job, stack=traceback.format_exc())
        release(conn, "job")
        return _JobRun(job, more=more is True)


    # ---- shutdown ---------------------------------------------------------------

    def drain(self) -> None:
        """Answer parked messages with :meth:`drained_reply` at the next turn.

        New messages that would park get the drained reply at once. Call
        :meth:`close` afterwards to stop the loop once the inbox is empty.
        """
        self.draining = True
        # A full inbox means a turn is coming anyway.
        with contextlib.suppress(trio.WouldBlock, trio.ClosedResourceError,
                                 trio.BrokenResourceError):
            self._send.send_nowait(Envelope[Any](_Nudge()))

    def close(self) -> None:
        """Stop accepting messages; the loop ends after those already queued."""
        self._send.close()


class _Nudge(Tell):
    """Internal no-op message: makes the actor take a turn now."""
