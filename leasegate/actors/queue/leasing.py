"""Handing out leases, the same on both channels: the claims of one lease call (or
the same ones again, for a retry with its ``request_id``), a lease call that waits
until work appears, and the give-back of leases nobody received.

Each channel's lease handler is plain code that calls the steps here, passing its
own SQL's rows, its lease view, how long a lease holds, the attempt it is and since
when the job waited; the difference between the channels on purpose (a task's
lease is a claim to start, a query's is the run itself) stays in its own handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

from leasegate.actors.channels import JobQueue
from leasegate.actors.checks import (
    check_flag,
    check_id,
    check_ids,
    check_int,
    check_leases,
    check_number,
)
from leasegate.actors.queue.leases import lease_wait, new_lease_token
from leasegate.actors.queue.sites import Admission
from leasegate.actors.queue.turn import QueueTurn
from leasegate.actors.runtime.batches import MAX_BATCH, check_messages
from leasegate.actors.runtime.handlers import Handlers, Waiting
from leasegate.actors.runtime.mailbox import Ask, Message, Tell
from leasegate.actors.runtime.turn import Receiver, SetBased
from leasegate.actors.runtime.waiters import NOT_YET, NotYet
from leasegate.errors import InvalidRequest, LeasegateError, Unavailable
from leasegate.storage.engine import Row

A_contra = TypeVar("A_contra", contravariant=True)
L = TypeVar("L", bound="Lease")
L_co = TypeVar("L_co", covariant=True)
T = TypeVar("T", bound=Tell[Any])
QT = TypeVar("QT", bound=QueueTurn[Any])
LA = TypeVar("LA", bound="LeaseCall[Any, Any]")
M = TypeVar("M", bound=Ask[Any, Any])
V_co = TypeVar("V_co", covariant=True)
V = TypeVar("V")

MAX_LEASES: Final = MAX_BATCH


@dataclass(frozen=True)
class LeaseCall(Ask[A_contra, tuple[L_co, ...]]):
    """A worker's lease call, the same on both channels (each names its own:
    ``LeaseTasks`` derives from it): up to ``max`` jobs of ``sites``; with ``wait``,
    waiting until work appears; ``request_id`` makes a retry get the same leases."""

    worker_id: str
    sites: tuple[str, ...] | None = None  # None: every site
    max: int = 1  # 1–100 (tasks: distinct lanes)
    request_id: str | None = None
    wait: bool = False  # wait until work appears
    key_id: str | None = None  # the worker key's id: bounds the workers one key creates

    def check(self) -> None:
        check_id("worker_id", self.worker_id)
        check_ids("sites", self.sites)
        check_int("max", self.max, 1, MAX_LEASES)
        check_id("request_id", self.request_id, optional=True)
        check_flag("wait", self.wait)
        check_id("key_id", self.key_id, optional=True)


@dataclass(frozen=True)
class LeaseAfterResults(Ask[A_contra, tuple[tuple[V_co | LeasegateError, ...], tuple[L_co, ...]]],
                        Generic[A_contra, M, V_co, L_co]):
    """A lease call that carries the outcomes of the worker's previous jobs: one
    message, so one turn and one commit. The results are applied first, exactly as the
    results route applies them (set-based; each its answer or its error, in order);
    then the lease, which never waits here (``lease.wait`` is False: the route
    makes a second, plain lease call wait when this one found nothing). Results first: the
    lanes they free are leased in the same call."""

    results: tuple[M, ...]
    lease: LeaseCall[A_contra, L_co]
    item: ClassVar[type[Message]] = Message  # what every result must be
    lease_kind: ClassVar[type[Message]] = Message  # what the lease must be

    def check(self) -> None:
        check_messages(self.results, self.item, "result")
        if not isinstance(self.lease, self.lease_kind):
            raise InvalidRequest(f"lease must be a {self.lease_kind.__name__}")
        self.lease.check()
        if self.lease.wait:
            raise InvalidRequest("a lease that carries results does not wait")


class Lease(Protocol):
    """What both channels' leases, as handed out, have."""

    @property
    def job_id(self) -> str: ...
    @property
    def lease_token(self) -> str: ...


@dataclass(frozen=True)
class ReleaseLeases(Tell[A_contra]):
    """Leases handed to a caller that was already gone: back in line, burning nothing
    (each channel names its own, ``ReleaseTaskLeases`` for the task actor)."""

    leases: tuple[tuple[str, str], ...]  # (job_id, lease_token)

    def check(self) -> None:
        check_leases(self.leases)


@dataclass(frozen=True)
class Sighting:
    """A worker's lease call on the query channel: when, its sites (None: all), its key."""

    worker_id: str
    at: float
    sites: tuple[str, ...] | None
    key_id: str | None


@dataclass(frozen=True)
class SeenOnQueries(Tell[JobQueue]):
    """Workers the query channel saw (told by the query actor after its commit): the
    task actor, which keeps worker presence, records them as seen on queries."""

    sightings: tuple[Sighting, ...]

    def check(self) -> None:
        for seen in self.sightings:
            check_id("worker_id", seen.worker_id)
            check_number("at", seen.at, 0, 1e12)
            check_ids("sites", seen.sites)
            check_id("key_id", seen.key_id, optional=True)


# A worker's presence on queries is told at most this often while its sites and key stay
# the same (a busy query worker calls many times a second), and at most this many
# workers are remembered between tells (worker ids are the callers').
TELL_PRESENCE_EVERY: Final = 10.0
TOLD_AT_MOST: Final = 10_000


class PresenceTeller:
    """The query actor's side of worker presence: a lease call's sighting, told to the
    task actor after the commit, once in a while per worker."""

    def __init__(self, to: Receiver[SeenOnQueries] | None, every: float) -> None:
        self.to, self.every = to, every
        self.told: dict[str, tuple[float, tuple[str, ...] | None, str | None]] = {}

    def saw(self, turn: QueueTurn[Any], worker_id: str, sites: tuple[str, ...] | None,
            key_id: str | None) -> None:
        if self.to is None:
            return
        last = self.told.get(worker_id)
        if last is not None and last[0] > turn.now - self.every and last[1:] == (sites, key_id):
            return
        if len(self.told) >= TOLD_AT_MOST:
            self.told.clear()
        self.told[worker_id] = (turn.now, sites, key_id)
        turn.tell_after_commit(self.to, SeenOnQueries((Sighting(worker_id, turn.now, sites,
                                                                key_id),)),
                               "a query worker's presence waits for its next lease call")


def lease_sites(m: LeaseCall[Any, Any]) -> list[str] | None:
    """A lease call's sites as its SQL takes them (None: every site)."""
    return list(m.sites) if m.sites is not None else None


@contextmanager
def admitted_sites(turn: QueueTurn[Any], m: LeaseCall[Any, Any],
                   ) -> Iterator[tuple[list[str] | None, Admission | None]]:
    """The sites a lease call may pick from and what admits their jobs (None: every
    job): a paused site is never leased, a throttled one as its tokens allow. The
    tokens the pick drew are written back when it ends."""
    gate = turn.sites
    if gate.idle:
        yield lease_sites(m), None
        return
    admit = gate.admission(turn.conn, turn.now)
    yield gate.unpaused(m.sites), admit
    admit.spend()


def claims(turn: QueueTurn[Any], m: LeaseCall[Any, Any], queued: Sequence[Row],
           expires_at: float,
           ) -> tuple[list[tuple[str, str]], str, str | None, float, float]:
    """What takes the picked jobs in one UPDATE of them all: each with a lease token of
    its own, for the worker (and its ``request_id``) until ``expires_at``."""
    id_column = turn.kind.id_column
    return ([(row[id_column], new_lease_token()) for row in queued], m.worker_id,
            m.request_id, expires_at, turn.now)


def record_leased(turn: QueueTurn[Any], m: LeaseCall[Any, Any], leased: Sequence[Row],
                  attempt: Callable[[Row], int], waiting_since: Callable[[Row], float],
                  ) -> Sequence[Row]:
    """``leased`` (returned), their history in one insert, each with the attempt it is
    and since when its job waited, by the channel's named functions; waited: from
    submit (or not_before) to this lease, the dispatch latency."""
    id_column, now = turn.kind.id_column, turn.now
    turn.history.record_many("leased", [
        (row[id_column], row, {"worker_id": m.worker_id, "attempt": attempt(row),
                               "waited": round(now - waiting_since(row), 3)})
        for row in leased])
    return leased


def leases_or_not_yet(turn: QT, m: LA, lease: Callable[[QT, LA], tuple[L, ...]],
                  ) -> tuple[L, ...] | NotYet:
    """A lease call served now (refused while the gateway shuts down): its leases by the
    channel's ``lease``, or ``NOT_YET`` when it found none and waits."""
    if turn.draining:
        raise Unavailable("the gateway is shutting down")
    leases = lease(turn, m)
    if not leases and m.wait:
        return NOT_YET
    return leases


def handle_results_then_lease(handlers: Handlers[Any, QT],
                              kind: type[LeaseAfterResults[Any, M, V, L]],
                              result: Callable[[QT, M], V],
                              result_all: SetBased[QT, M, V],
                              lease_or_wait: Callable[[QT, Any], tuple[L, ...] | NotYet],
                              ) -> None:
    """Register the handler of ``kind``, a lease call carrying results: the results as
    the results route applies them (the channel's ``result_all``: set-based, else each
    by ``result`` in a savepoint of its own), then the lease (by the channel's
    ``lease_or_wait``, which never waits here)."""
    def results_then_lease(turn: QT, m: LeaseAfterResults[Any, Any, Any, Any],
                           ) -> tuple[tuple[V | LeasegateError, ...], tuple[L, ...]]:
        assert isinstance(m, kind)  # the runtime routes only ``kind`` here; this narrows it
        answers = turn.each(m.results, result, result_all)
        if turn.draining:  # the results are taken; no new work while shutting down
            return answers, ()
        leases = lease_or_wait(turn, m.lease)
        assert not isinstance(leases, NotYet)  # checked: a lease carrying results never waits
        return answers, leases

    handlers.on(kind)(results_then_lease)


def waiting_for_work(lease: Callable[[QT, LA], tuple[L, ...]],
                     give_back: Callable[[tuple[L, ...]], Tell[Any] | None],
                     ) -> Waiting[QT, tuple[L, ...]]:
    """How a lease call that found nothing waits: woken by new work at its sites, it
    tries again unless a waiter with the same sites found nothing in this turn
    already; at shutdown it gets nothing; leases its caller never received are given
    back. One that got fewer than its ``max`` took all there was: its sites are dry too
    (no later waiter looks, and other gateways are not told of that work)."""
    def serve(turn: QT, m: LA) -> tuple[L, ...] | None:
        if turn.dry.known(turn.number, m.sites):
            return None
        leases = lease(turn, m)
        if len(leases) < m.max:
            turn.dry.add(turn.number, m.sites)
        return leases or None

    return Waiting(wait=lambda m: lease_wait(m.sites), serve=serve, drained=lambda turn, m: (),
                 give_back=give_back)


def give_back_with(message: Callable[[tuple[tuple[str, str], ...]], T],
                   ) -> Callable[[tuple[L, ...]], T | None]:
    """What gives back leases their caller never received, as ``message`` (None:
    nothing to give)."""
    def give_back(leases: tuple[L, ...]) -> T | None:
        if not leases:
            return None
        return message(tuple((lease.job_id, lease.lease_token) for lease in leases))

    return give_back
