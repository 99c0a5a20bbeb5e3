"""The actor runtime: mailbox, ask/reply, group commit, timers, parked waiters.

An :class:`Actor` is one trio task that owns its state and its tables. Others
reach it only through its :class:`Mailbox`. Each turn of its loop it takes
every message already waiting (up to ``batch_limit``), applies them in one
SQLite transaction with a savepoint per message, runs the periodic jobs that
are due in the same transaction, commits once, and only then replies to all
(DESIGN.md §5: durable before acknowledged, group commit)::

    class Counter(Actor):
        name = "counter"

        def handle(self, conn, message):
            conn.execute("UPDATE counter SET n = n + 1")
            return conn.execute("SELECT n FROM counter").fetchone()[0]

    async with trio.open_nursery() as nursery:
        counter = Counter(db, clock)
        nursery.start_soon(counter.run)
        n = await counter.mailbox.ask(Increment())

Long-polls park inside the actor: :meth:`Actor.handle` returns :data:`PARK`,
and the runtime offers the message to :meth:`Actor.serve_parked` inside each
later transaction in which work may have appeared. A reply that cannot be
delivered (the caller is gone) is handed to :meth:`Actor.undelivered`, which
may schedule compensating work (e.g. releasing a lease nobody received).
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import outcome
import trio

from leasegate.actors.mailbox import Envelope, Mailbox
from leasegate.clock import Clock
from leasegate.errors import LeasegateError, Unavailable
from leasegate.storage.connection import Database, is_storage_failure

log = logging.getLogger("leasegate.actors")

MAILBOX_SIZE: Final = 4096
BATCH_LIMIT: Final = 256
STORAGE_RETRY_DELAY: Final = 1.0
CATCH_UP_DELAY: Final = 1.0


class _Park:
    def __repr__(self) -> str:
        return "PARK"


PARK: Final = _Park()
"""Returned by :meth:`Actor.handle` to hold the reply until work appears."""

@dataclass
class PeriodicJob:
    """A job an actor runs on its own timer, in its own savepoint.

    ``every`` is the interval in seconds; a run that returns True (more to do,
    e.g. a purge that hit its batch size) runs again after about a second. An
    exception is logged (at most once per ``error_log_window`` per job, with a
    count and the stack tail) and the job runs again next time; it never takes
    the actor down.
    """

    name: str
    every: float
    run: Callable[[sqlite3.Connection, float], Any]
    next_at: float = 0.0
    runs: int = 0
    failures: int = 0
    last_run_at: float | None = None
    last_error_logged_at: float = -math.inf
    errors_since_log: int = 0
    more: bool = False  # the last run returned True: it has more to do

    def succeeded(self, now: float) -> None:
        self.runs += 1
        self.last_run_at = now

    def failed(self, now: float, window: float, *, owner: str) -> None:
        """Count a failure; log it with the stack tail at most once per ``window``.

        Call from inside the ``except`` block: the stack is the active exception's.
        """
        self.failures += 1
        self.errors_since_log += 1
        if now - self.last_error_logged_at >= window:
            log.warning("%s: periodic job %s failed (%d times since the last report); "
                        "it runs again next time:\n%s",
                        owner, self.name, self.errors_since_log, traceback.format_exc()[-600:])
            self.last_error_logged_at = now
            self.errors_since_log = 0


@dataclass
class _Batch:
    envelopes: list[Envelope]
    jobs: list[PeriodicJob]
    parked: list[Envelope]
    results: list[outcome.Outcome[Any] | None] = field(default_factory=list)
    served: list[tuple[Envelope, outcome.Outcome[Any]]] = field(default_factory=list)
    effects: list[Callable[[], None]] = field(default_factory=list)


class Actor:
    """Base class. Subclasses implement :meth:`handle` and may override the hooks.

    Everything that runs inside the transaction runs on the database thread
    while the actor task waits for it, so there is never more than one
    thread touching the actor's state at a time: no locks are needed. Code
    there reads the time from :attr:`now` (fixed on the trio side for the
    whole turn), never from the clock: trio's clock is not readable off its
    thread, and one turn should see one instant.
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
        self._send, self._inbox = trio.open_memory_channel[Envelope](mailbox_size)
        self.mailbox = Mailbox(self._send)
        self.jobs: list[PeriodicJob] = []
        self._parked: list[Envelope] = []
        self._effects: list[Callable[[], None]] = []
        self._internal: list[Any] = []
        self._next_wakeup: float | None = None
        self._retry_at = -math.inf
        self._work_may_be_available = False
        self.draining = False
        self.batches = 0
        self.turn = 0  # counts turns, failed ones too: "within this transaction"
        self.now = clock.now()

    # ---- hooks for subclasses -------------------------------------------------

    def handle(self, conn: sqlite3.Connection, message: Any) -> Any:
        """Apply one message inside its savepoint; return the reply or :data:`PARK`.

        Raise a :class:`LeasegateError` to roll back this message alone.
        """
        raise NotImplementedError

    def serve_parked(self, conn: sqlite3.Connection, message: Any) -> Any | None:
        """Try again to answer a parked message; ``None`` keeps it parked."""
        return None

    def drained_reply(self, conn: sqlite3.Connection, message: Any) -> Any:
        """What a parked message gets when the actor drains for shutdown (not None)."""
        raise Unavailable("the gateway is shutting down")

    def undelivered(self, message: Any, reply: Any) -> Any | None:
        """The caller of ``message`` is gone; return internal work to undo ``reply``."""
        return None

    def next_wakeup(self, conn: sqlite3.Connection) -> float | None:
        """The wall time of the next data-driven deadline (e.g. a lease expiry), computed
        at the end of each turn. It must be exact: :meth:`on_wakeup` runs only once it
        has come."""
        return None

    def on_wakeup(self, conn: sqlite3.Connection, now: float) -> None:
        """Handle every data-driven deadline that has passed (at the start of a turn, in
        its transaction, before any message)."""

    def on_start(self, conn: sqlite3.Connection) -> None:
        """Runs once in a transaction before the first message."""

    # ---- helpers for subclasses ----------------------------------------------

    def after_commit(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` on the trio thread once the current message commits.

        Dropped if the message rolls back or the commit fails.
        """
        self._effects.append(effect)

    def work_may_be_available(self) -> None:
        """Offer the parked messages another try in this transaction."""
        self._work_may_be_available = True

    def add_job(self, name: str, every: float,
                run: Callable[[sqlite3.Connection, float], Any]) -> PeriodicJob:
        job = PeriodicJob(name, every, run)
        self.jobs.append(job)
        return job

    @property
    def parked_count(self) -> int:
        return len(self._parked)

    # ---- the loop ---------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the mailbox until it is closed (see :meth:`close`).

        An unexpected exception (a bug, not a domain or storage error)
        propagates and takes the whole system down with it, on purpose.
        """
        now = self.clock.now()
        for job in self.jobs:
            job.next_at = now + job.every
        await self._start_up()
        task_status.started()
        while True:
            envelopes = await self._collect()
            if envelopes is None:
                break
            await self._turn(envelopes)
        for env in self._parked:  # parked after the drain turn: not answered yet
            self._reply(env, outcome.Error(Unavailable("the gateway is shutting down")))
        self._parked.clear()

    async def _start_up(self) -> None:
        def start(conn: sqlite3.Connection) -> float | None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                self.on_start(conn)
                wake = self.next_wakeup(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return wake

        self.now = self.clock.now()
        self._next_wakeup = await self.db.run(start)

    def _deadline(self) -> float:
        due = [job.next_at for job in self.jobs]
        if self._next_wakeup is not None:
            due.append(self._next_wakeup)
        if self._internal:
            due.append(-math.inf)
        if not due:
            return math.inf
        # After a storage failure, nothing of our own is retried before
        # _retry_at (callers' messages still are: they fail fast with 503).
        return self.clock.deadline(max(min(due), self._retry_at))

    async def _collect(self) -> list[Envelope] | None:
        """Wait for messages or the next deadline; None when the mailbox is closed."""
        envelopes: list[Envelope] = []
        with trio.move_on_at(self._deadline()):
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

    async def _turn(self, envelopes: list[Envelope]) -> None:
        now = self.now = self.clock.now()
        self.turn += 1
        internal, self._internal = self._internal, []
        envelopes = [Envelope(m) for m in internal] + envelopes
        due_jobs = [job for job in self.jobs if job.next_at <= now]
        self._parked = [env for env in self._parked if not env.caller_gone()]
        batch = _Batch(envelopes, due_jobs, list(self._parked))
        try:
            wake = await self.db.run(lambda conn: self._apply(conn, batch, now))
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            log.warning("%s: storage failure, batch of %d not applied: %s",
                        self.name, len(envelopes), exc)
            for env in envelopes:  # an Outcome unwraps once: one each
                self._reply(env, outcome.Error(Unavailable(f"storage failure: {exc}")))
            # Retry our own work (deadlines, jobs, compensations) in a second,
            # not in a tight loop against a full disk.
            self._retry_at = now + STORAGE_RETRY_DELAY
            for job in due_jobs:
                job.next_at = now + min(job.every, STORAGE_RETRY_DELAY)
            self._internal.extend(internal)
            return
        self._retry_at = -math.inf
        self.batches += 1
        self._next_wakeup = wake
        for job in due_jobs:
            # A job that says it has more to do (a purge behind) runs again soon.
            job.next_at = now + (min(job.every, CATCH_UP_DELAY) if job.more else job.every)
        for effect in batch.effects:
            effect()
        for env, result in zip(batch.envelopes, batch.results, strict=True):
            if result is PARK_OUTCOME:
                self._parked.append(env)
            elif result is not None:
                self._reply(env, result)
        served = {id(env) for env, _ in batch.served}
        self._parked = [env for env in self._parked if id(env) not in served]
        for env, result in batch.served:
            self._reply(env, result)

    def _apply(self, conn: sqlite3.Connection, batch: _Batch, now: float) -> float | None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._effects = []
            self._work_may_be_available = False
            # Deadlines first, so every message sees the state as of `now`; only
            # when one is due (next_wakeup is exact), not on every turn.
            if self._next_wakeup is not None and now >= self._next_wakeup:
                self.on_wakeup(conn, now)
            for env in batch.envelopes:
                batch.results.append(self._apply_one(conn, env))
            for job in batch.jobs:
                self._run_job(conn, job, now)
            parked = [env for env in batch.parked]
            parked += [
                env for env, result in zip(batch.envelopes, batch.results, strict=True)
                if result is PARK_OUTCOME
            ]
            if parked and (self._work_may_be_available or self.draining):
                for env in parked:
                    if self.draining:
                        batch.served.append((env, self._drained(conn, env.message)))
                        continue
                    reply = self.serve_parked(conn, env.message)
                    if reply is not None:
                        batch.served.append((env, outcome.Value(reply)))
            wake = self.next_wakeup(conn)
            batch.effects = self._effects
            conn.execute("COMMIT")
        except BaseException:
            self._effects = []
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return wake

    def _apply_one(self, conn: sqlite3.Connection, env: Envelope) -> outcome.Outcome[Any] | None:
        if isinstance(env.message, _Nudge):
            return None
        mark = len(self._effects)
        conn.execute("SAVEPOINT message")
        try:
            reply = self.handle(conn, env.message)
        except LeasegateError as exc:
            self._rollback_savepoint(conn, mark)
            return outcome.Error(exc)
        # Any other exception propagates. A storage failure fails the whole batch
        # (SQLite may already have rolled the transaction back: SQLITE_FULL, IOERR);
        # a bug takes the actor, and with it the process, down.
        conn.execute("RELEASE message")
        if reply is PARK:
            if self.draining:
                return self._drained(conn, env.message)
            parked: outcome.Outcome[Any] = PARK_OUTCOME
            return parked
        return outcome.Value(reply) if env.reply is not None else None

    def _drained(self, conn: sqlite3.Connection, message: Any) -> outcome.Outcome[Any]:
        try:
            return outcome.Value(self.drained_reply(conn, message))
        except LeasegateError as exc:
            return outcome.Error(exc)

    def _rollback_savepoint(self, conn: sqlite3.Connection, mark: int) -> None:
        conn.execute("ROLLBACK TO message")
        conn.execute("RELEASE message")
        del self._effects[mark:]

    def _run_job(self, conn: sqlite3.Connection, job: PeriodicJob, now: float) -> None:
        mark = len(self._effects)
        conn.execute("SAVEPOINT job")
        try:
            more = job.run(conn, now)
        except Exception as exc:
            if is_storage_failure(exc):
                raise  # fails the turn; SQLite may have rolled back already
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            del self._effects[mark:]
            job.failed(now, self.error_log_window, owner=self.name)
            return
        conn.execute("RELEASE job")
        job.succeeded(now)
        job.more = more is True

    def _reply(self, env: Envelope, result: outcome.Outcome[Any]) -> None:
        if env.reply is None:
            return
        try:
            env.reply.send_nowait(result)
        except (trio.BrokenResourceError, trio.WouldBlock, trio.ClosedResourceError):
            if isinstance(result, outcome.Value):
                work = self.undelivered(env.message, result.value)
                if work is not None:
                    self._internal.append(work)
        finally:
            env.reply.close()

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
            self._send.send_nowait(Envelope(_Nudge()))

    def close(self) -> None:
        """Stop accepting messages; the loop ends after those already queued."""
        self._send.close()


class _Nudge:
    """Internal no-op message: makes the actor take a turn now."""


PARK_OUTCOME: Final[Any] = outcome.Value(PARK)
