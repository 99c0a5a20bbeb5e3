"""Job history: each task's and query's events, recorded with its transitions.

A queue actor's handler calls :meth:`JobHistory.record` once per transition,
inside the turn: the row is written in the same transaction (durable before the
reply acknowledges anything) and handed to the live
:class:`~leasegate.actors.event_stream.EventHub` only after the commit (a
rolled-back message publishes nothing)::

    turn.history.record(task_id, "started", worker_id=m.worker_id, attempt=2)

``settled`` comes from the ledger, which owns the holds and decides charge and
refund: after its own commit it tells the job's queue actor
:class:`~leasegate.actors.channels.RecordSettled`, and the queue actor records it
like any other event. So each table keeps one writer (the ledger never writes a
queue's history, the queues never read the ledger's holds), and the message is a
``tell``: the ledger never waits on a queue (the queues ask the ledger; the
reverse wait could deadlock). A notice lost to a full inbox loses that history
line only; the job's ``billing`` still shows the settlement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leasegate.actors.channels import Channel
from leasegate.actors.event_stream import JobEvent
from leasegate.actors.payloads import compact_json, stored_loads
from leasegate.actors.queue.leases import job_changed
from leasegate.actors.runtime.turn import Turn
from leasegate.actors.views import Instant
from leasegate.actors.webhooks import event_type
from leasegate.storage import events_sql, webhooks_sql
from leasegate.storage.engine import Connection, Row

if TYPE_CHECKING:
    from leasegate.actors.event_stream import EventHub


# Events recorded on a job that stays as it was (its status is no transition's).
NOT_TRANSITIONS = frozenset({"settled"})

# A detail value larger than this (as JSON) is recorded by its size only: a progress
# checkpoint may be 64 KiB, and a job keeps 200 events, the live ring 10,000.
DETAIL_VALUE_MAX = 2048


@dataclass(frozen=True)
class HistoryItem:
    """A job's event as its history lists it (the job's own fields left out)."""

    event_id: int
    at: Instant
    kind: str
    status: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class History:
    items: tuple[HistoryItem, ...]


class JobHistory:
    """A queue actor's recorder: rows in its turn's transaction, the hub after its
    commit."""

    def __init__(self, turn: Turn, channel: Channel, id_column: str,
                 hub: EventHub | None) -> None:
        self.turn = turn
        self.channel: Channel = channel
        self.id_column = id_column
        self.hub = hub
        # Rung after a commit that wrote webhook deliveries (the deliverer's wake-up).
        self.outbox_written: Callable[[], None] | None = None

    def record(self, job_id: str, kind: str, *, job: events_sql.JobRow | None = None,
               **detail: Any) -> None:
        """Record ``kind`` for the job as it is now (call after the transition; ``job``:
        its row after the transition, when the caller has it: one read less). Every
        transition is recorded, so this is also where the job's waiting readers (a
        ``GET ?wait_seconds``) are woken: none of its transitions can miss them."""
        turn = self.turn
        turn.work_may_be_available(job_changed(job_id))
        kept = {k: _bounded(v) for k, v in detail.items() if v is not None}
        at = turn.now
        row = events_sql.append(turn.conn, self.channel, job_id, kind, compact_json(kept), at,
                                job)
        if row is not None:
            self._outbox(kind, [(job_id, row)])
        hub = self.hub
        if row is not None and hub is not None:
            event = JobEvent(row["event_id"], self.channel, job_id, row["tenant"], row["site"],
                             row["device_id"], kind, row["status"], at, kept, row["kind"])
            turn.after_commit(lambda: hub.publish(event))

    def record_many(self, kind: str,
                    jobs: Sequence[tuple[str, events_sql.JobRow, dict[str, Any]]]) -> None:
        """:meth:`record` of ``kind`` for many jobs (distinct ones), each ``(job_id,
        job, detail)`` with its row after the transition, in one statement."""
        if not jobs:
            return
        turn = self.turn
        turn.work_may_be_available(*(job_changed(job_id) for job_id, _, _ in jobs))
        kept = [{k: _bounded(v) for k, v in detail.items() if v is not None}
                for _, _, detail in jobs]
        at = turn.now
        rows = events_sql.append_many(
            turn.conn, self.channel, kind, at,
            [(job_id, compact_json(d), job) for (job_id, job, _), d in zip(jobs, kept,
                                                                          strict=True)])
        self._outbox(kind, [(job_id, row) for (job_id, _, _), row in zip(jobs, rows,
                                                                        strict=True)])
        hub = self.hub
        if hub is not None:
            events = [JobEvent(row["event_id"], self.channel, job_id, row["tenant"],
                               row["site"], row["device_id"], kind, row["status"], at, d,
                               row["kind"])
                      for row, (job_id, _, _), d in zip(rows, jobs, kept, strict=True)]

            turn.after_commit(lambda: hub.publish_many(events))

    def _outbox(self, kind: str, jobs: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """The webhook deliveries of the jobs' transitions that are webhook events, in
        this transaction: a crash cannot keep the transition and lose its deliveries."""
        if kind in NOT_TRANSITIONS:
            return
        events = [(self.channel, job_id, row["tenant"], name) for job_id, row in jobs
                  if (name := event_type(self.channel, row["status"])) is not None]
        if events and webhooks_sql.write_outbox(self.turn.conn, self.turn.now, events):
            ring = self.outbox_written
            if ring is not None:
                self.turn.after_commit(ring)

    def controlled(self, action: str, before: Row, after: Row, by: str | None = None,
                   reason: str | None = None) -> None:
        """Record what a cancel, pause or resume changed (nothing: no event), and who
        did it and why when an operator says."""
        kind = _control_kind(action, before, after)
        if kind is not None:
            self.record(after[self.id_column], kind, by=by, reason=reason)

    def read(self, job_id: str) -> History:
        return History(tuple(HistoryItem(r["event_id"], r["at"], r["kind"], r["status"],
                                         stored_loads(r["detail"]))
                             for r in events_sql.history(self.turn.conn, self.channel, job_id)))


def committed_after(conn: Connection, order: events_sql.CommitOrder, after: int,
                    limit: int) -> tuple[list[JobEvent], bool]:
    """Up to ``limit`` committed events with ids above ``after``, every gateway's, in id
    order, none of which a lower id can follow, and whether more are held back behind
    one still in flight: what a hub tails on PostgreSQL (``event_stream.Tail``, on a
    database thread)."""
    rows, held_back = order.read(conn, after, limit)
    return [JobEvent(r["event_id"], r["channel"], r["job_id"], r["tenant"], r["site"],
                     r["device_id"], r["kind"], r["status"], r["at"], stored_loads(r["detail"]),
                     r["job_kind"])
            for r in rows], held_back


def _bounded(value: Any) -> Any:
    if isinstance(value, dict | list):
        size = len(compact_json(value))
        if size > DETAIL_VALUE_MAX:
            return {"omitted": f"{size} bytes of JSON (kept up to {DETAIL_VALUE_MAX})"}
    elif isinstance(value, str) and len(value) > DETAIL_VALUE_MAX:
        return value[:DETAIL_VALUE_MAX] + "…"
    return value


def _control_kind(action: str, before: Row, after: Row) -> str | None:
    status, was = after["status"], before["status"]
    if action == "cancel":
        if status == "canceled" and was != "canceled":
            return "canceled"
        if after["cancel_requested"] and not before["cancel_requested"]:
            return "cancel_requested"
    elif action == "pause":
        if status == "paused" and was != "paused":
            return "paused"
        if after["pause_requested"] and not before["pause_requested"]:
            return "pause_requested"
    elif (was == "paused" and status != "paused") or (
            before["pause_requested"] and not after["pause_requested"]):
        return "resumed"
    return None
