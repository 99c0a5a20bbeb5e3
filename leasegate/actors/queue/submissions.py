"""Idempotent submission, shared by both job channels.

A client-chosen id that exists already is a replay when the payload is the
same, and 6004 when it differs; a server-generated id carries 96 random bits
and is never taken for a replay. A purged job leaves a tombstone (tenant,
fingerprint, final status) that the insert refuses and ``get`` returns, so a
resubmit days later is still a replay (or 6004), never the job again::

    job_id, replayed = submit_once(given_id, "t", digest, "task", insert, get)
    if replayed is None: ...   # created

Both channels' submit messages derive from :class:`Submit`: what the jobs facade
needs of one to hold its ``max_cost`` before it is enqueued. Each channel's submit
handlers make its row (a :class:`NewJob`) and call the shared steps with it: one
submit (:func:`submit_one`), and a batch of them set-based (:func:`submit_all`): one
read of the ids a client chose, one INSERT of the new jobs, one of their history rows.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self, TypeVar

from leasegate.actors.checks import (
    MAX_AMOUNT,
    check_id,
    check_int,
    check_job_id,
    check_json,
    keep_text,
)
from leasegate.actors.payloads import canonical_json
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.turn import QueueTurn
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.runtime.turn import RetryItemByItem
from leasegate.actors.views import JSONObject
from leasegate.errors import IdempotencyConflict, LeasegateError
from leasegate.storage.engine import Connection, Row

A_contra = TypeVar("A_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")


@dataclass(frozen=True)
class Submit(Ask[A_contra, R_co]):
    """A job's submit: the fields every channel's has (checked here), and its id
    (None: the server chooses one) and the ``max_cost`` to hold (None: no hold), as the
    jobs facade reads them whatever the channel. Each channel's submit adds its id
    field (``id_field``), ``max_cost`` and what only it has."""

    tenant: str
    site: str
    kind: str
    params: JSONObject = field(default_factory=dict)
    id_field: ClassVar[str]  # the channel's name of its job id (``task_id``)

    @property
    def max_cost(self) -> int | None:
        raise NotImplementedError  # each channel's submit has the field

    @functools.cached_property
    def params_text(self) -> str:
        """``params`` as stored: canonical JSON, made once a message (by :meth:`check`,
        which proves JSON can carry them; the handler stores it and takes its
        fingerprint)."""
        return canonical_json(self.params)

    def check(self) -> None:
        for name, value in (("tenant", self.tenant), ("site", self.site), ("kind", self.kind)):
            check_id(name, value)
        check_job_id(self.id_field, self.job_id)
        keep_text(self, "params_text", check_json("params", self.params, optional=False,
                                                  object_only=True))
        check_int("max_cost", self.max_cost, 0, MAX_AMOUNT, optional=True)

    @property
    def job_id(self) -> str | None:
        job_id: str | None = getattr(self, self.id_field)
        return job_id

    def with_job_id(self, job_id: str) -> Self:
        """The same submit under ``job_id`` (the id is chosen before the hold)."""
        changes: dict[str, Any] = {self.id_field: job_id}
        return dataclasses.replace(self, **changes)


def new_id(prefix: str) -> str:
    """A server-generated id: 96 random bits, never a replay of an existing id."""
    return f"{prefix}-{secrets.token_hex(12)}"


def submit_once(given_id: str | None, prefix: str, digest: str, noun: str,
                insert: Callable[[str], bool],
                get: Callable[[str], Row | None]) -> tuple[str, str | None]:
    """Insert a submission once: ``(id, None)`` when it was created, ``(id, status)``
    for an identical replay of a client-chosen id.

    A different payload under that id is 6004. A generated id that collides
    (96 bits: never) is drawn again, never taken for a replay. The insert comes
    first, so a new submission costs one statement.
    """
    while True:
        job_id = given_id or new_id(prefix)
        if insert(job_id):
            return job_id, None
        if given_id is None:
            continue
        existing = get(job_id)
        assert existing is not None, job_id
        if existing["fingerprint"] != digest:
            raise _conflict(noun, job_id)
        return job_id, str(existing["status"])


def _conflict(noun: str, job_id: str) -> LeasegateError:
    return IdempotencyConflict(f"{noun} {job_id} exists with a different payload")


@dataclass(frozen=True)
class NewJob:
    """A submit as its job's row will be (its id left out), and its fingerprint."""

    row: dict[str, Any]  # the history reads tenant, site, status, kind (device_id) of it
    digest: str
    leasable: bool  # at once: the lease calls waiting at its site are woken


class SubmitSQL(Protocol):
    """A channel's job table (its SQL module's ``JOBS``), as submits use it."""

    def insert_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]], /) -> int:
        """Rows inserted in one statement unless their ids are taken: how many were."""
        ...

    def known(self, conn: Connection, ids: Sequence[str], /) -> dict[str, Row]:
        """Which of ``ids`` are taken (a job or a tombstone): ``fingerprint``, ``status``."""
        ...

    def submit_scope(self, given_id: str | None, /) -> tuple[str, ...]:
        """The lock a submit of ``given_id`` holds across gateways (``turn_locks``)."""
        ...


class Reply(Protocol[R_co]):
    """A channel's submit reply (a ``Receipt``), made from the job's id, its status and
    whether it was created."""

    def __call__(self, job_id: str, /, *, status: str, created: bool,
                 site_paused: bool) -> R_co: ...


def submit_one(turn: QueueTurn[Any], m: Submit[Any, Any], job: NewJob, reply: Reply[R],
               jobs: SubmitSQL) -> R:
    """One submit, ``job`` its row: created, or an identical replay of its id (else
    6004); its ``reply`` (the channel's receipt class)."""
    kind, conn = turn.kind, turn.conn
    job_id, replayed = submit_once(
        m.job_id, kind.id_prefix, job.digest, kind.noun,
        lambda i: jobs.insert_many(conn, [{kind.id_column: i, **job.row}]) == 1,
        lambda i: jobs.known(conn, [i]).get(i))
    paused = m.site in turn.sites.paused  # it still queues; the reply says it waits
    if replayed is not None:
        return reply(job_id, status=replayed, created=False, site_paused=paused)
    _created(turn, [(job_id, job)])
    return reply(job_id, status="queued", created=True, site_paused=paused)


def submit_all(turn: QueueTurn[Any], items: Sequence[Submit[Any, Any]],
               new_jobs: Sequence[NewJob], reply: Reply[R], jobs: SubmitSQL) -> list[R]:
    """A batch of submits (checked), each answered as :func:`submit_one` would, set-based:
    one read of the ids given, one insert of the new jobs. Raises :class:`RetryItemByItem`
    before it writes anything when an item fails (6004: each item is then applied in a
    savepoint of its own, and fails alone) or the answers depend on the order (an id
    given twice: the first creates, the others replay), and if the insert finds an id
    taken after all (a generated one: never)."""
    kind, conn = turn.kind, turn.conn
    chosen = [(m.job_id or new_id(kind.id_prefix), job)
              for m, job in zip(items, new_jobs, strict=True)]
    given = [m.job_id for m in items if m.job_id is not None]
    if len(set(given)) < len(given):
        raise RetryItemByItem("an id given twice")
    taken = jobs.known(conn, given) if given else {}
    if any(taken[job_id]["fingerprint"] != job.digest
           for job_id, job in chosen if job_id in taken):
        raise RetryItemByItem("an id taken with another payload")
    new = [(job_id, job) for job_id, job in chosen if job_id not in taken]
    if new:
        rows = [{kind.id_column: job_id, **job.row} for job_id, job in new]
        if jobs.insert_many(conn, rows) != len(rows):
            raise RetryItemByItem("an id taken after all")
        _created(turn, new)
    paused = turn.sites.paused  # they still queue; each reply says whether it waits
    return [reply(job_id, status=str(taken[job_id]["status"]), created=False,
                  site_paused=m.site in paused)
            if job_id in taken else reply(job_id, status="queued", created=True,
                                          site_paused=m.site in paused)
            for (job_id, _), m in zip(chosen, items, strict=True)]


def _created(turn: QueueTurn[Any], jobs: Sequence[tuple[str, NewJob]]) -> None:
    """The new jobs' history, in one statement, and the lease calls their sites wake."""
    turn.history.record_many("submitted", [(job_id, job.row, {}) for job_id, job in jobs])
    topics: set[Hashable] = set()
    for _, job in jobs:
        if job.leasable:
            topics.update(new_work(job.row["site"]))
    if topics:
        turn.work_may_be_available(*topics)
