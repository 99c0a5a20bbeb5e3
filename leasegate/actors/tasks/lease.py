"""Leasing tasks to workers, each message followed by its handler: a long-poll that
waits until work appears, and the give-back of claims nobody received.

A lease is only a *claim*: the worker must ``start`` it within
``task_claim_window`` (see ``fenced.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.leasing import (
    LeaseAfterResults,
    LeaseCall,
    ReleaseLeases,
    admitted_sites,
    claims,
    give_back_with,
    handle_results_then_lease,
    lease_sites,
    leases_or_not_yet,
    record_leased,
    waiting_for_work,
)
from leasegate.actors.runtime.waiters import NotYet
from leasegate.actors.tasks import Tasks, presence
from leasegate.actors.tasks.fenced import TaskResult, result, result_all
from leasegate.actors.tasks.turn import TASKS, TaskTurn, requeue_status
from leasegate.actors.tasks.views import TaskLease, TaskView, task_lease
from leasegate.logs import escape
from leasegate.storage import tasks_sql as sql
from leasegate.storage.engine import Row

log = logging.getLogger("leasegate.tasks")


@dataclass(frozen=True)
class ReleaseTaskLeases(ReleaseLeases[Tasks]):
    """Claims handed to a caller that was already gone: back to ``queued``."""


@TASKS.on(ReleaseTaskLeases)
def give_back(turn: TaskTurn, m: ReleaseTaskLeases) -> None:
    """Claims nobody received: back to the queue, burning nothing."""
    for task_id, token in m.leases:
        row = sql.JOBS.get(turn.conn, task_id)
        if row is None or row["status"] != "leased" or row["lease_token"] != token:
            continue
        if sql.back_to_queue(turn.conn, task_id, "leased", token, requeue_status(row),
                             turn.now):
            log.info("task lease released (never received): task_id=%s worker=%s",
                     escape(task_id), escape(row["lease_owner"]))
            turn.history.record(task_id, "released", worker_id=row["lease_owner"])
            turn.work_may_be_available(*new_work(row["site"]))


release_message = give_back_with(ReleaseTaskLeases)
"""What gives back claims their caller never received (None: nothing to give)."""


@dataclass(frozen=True)
class LeaseTasks(LeaseCall[Tasks, TaskLease]):
    """Claims of up to ``max`` tasks on distinct lanes, to start within
    ``task_claim_window``."""


def lease(turn: TaskTurn, m: LeaseTasks) -> tuple[TaskLease, ...]:
    """Up to ``m.max`` tasks on distinct lanes, each a claim to start within
    ``task_claim_window`` (its attempt is counted when it starts)."""
    replay = (sql.leased_by_request(turn.conn, m.worker_id, m.request_id, lease_sites(m), m.max)
              if m.request_id is not None else [])  # a retry after a lost response
    if replay:
        return tuple(map(task_lease, replay))
    return take_new(turn, m, turn.now + turn.settings.task_claim_window)


def _lease_seen(turn: TaskTurn, m: LeaseTasks) -> tuple[TaskLease, ...]:
    """A waiting lease call served later: its worker is seen when it gets work."""
    leases = lease(turn, m)
    if leases:
        turn.seen(m.worker_id, sites=m.sites, key_id=m.key_id, leasing=True)
    return leases


def attempt(row: Row) -> int:
    """The attempt a claim is: the next start's (attempts count at start)."""
    return int(row["attempts"]) + 1


def waiting_since(row: Row) -> float:
    """Since when a claimed task waited: its submit, or its ``not_before``."""
    return float(max(row["created_at"], row["not_before"] or 0.0))


def take_new(turn: TaskTurn, m: LeaseTasks, expires_at: float) -> tuple[TaskLease, ...]:
    # New claims until expires_at: picked at the sites the lease may take from, claimed
    # in one UPDATE, their history in one insert.
    with admitted_sites(turn, m) as (sites, admit):
        queued = sql.next_queued(turn.conn, sites, turn.now, m.max, admit=admit)
    leased = sql.take_leases(turn.conn, *claims(turn, m, queued, expires_at)) if queued else []
    return tuple(map(task_lease, record_leased(turn, m, leased, attempt, waiting_since)))


WAIT_FOR_WORK: Final = waiting_for_work(_lease_seen, release_message)
"""A lease that waits: woken by new work at its sites; at shutdown, nothing."""


@TASKS.may_wait(LeaseTasks, WAIT_FOR_WORK)
def lease_or_wait(turn: TaskTurn, m: LeaseTasks) -> tuple[TaskLease, ...] | NotYet:
    return leases_or_not_yet(turn, m, _admitted)


def _admitted(turn: TaskTurn, m: LeaseTasks) -> tuple[TaskLease, ...]:
    """A lease call served now: its worker admitted (a key creates so many workers) and
    seen, whether it gets work or not."""
    presence.admit(turn, m.worker_id, m.key_id)
    turn.seen(m.worker_id, sites=m.sites, key_id=m.key_id, leasing=True)
    return lease(turn, m)


@dataclass(frozen=True)
class LeaseTasksAfterResults(LeaseAfterResults[Tasks, TaskResult, TaskView, TaskLease]):
    """``POST /v1/tasks/lease`` with ``results``: the results, then the lease, in one
    turn (see ``LeaseAfterResults``)."""

    item = TaskResult
    lease_kind = LeaseTasks


handle_results_then_lease(TASKS, LeaseTasksAfterResults, result, result_all,
                          lease_or_wait)
