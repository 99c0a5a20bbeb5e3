"""The turn context both queue actors' handlers take, the descriptor of a
channel's table that the shared handlers read through, and the notices a queue
sends the ledger once a job with a hold has ended."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from leasegate.actors.channels import Channel
from leasegate.actors.ledger.holds import Settle
from leasegate.actors.queue.history import JobHistory
from leasegate.actors.queue.leases import DryFilters, left_for_others
from leasegate.actors.queue.sites import SiteGate
from leasegate.actors.runtime.turn import Turn
from leasegate.errors import LeasegateError
from leasegate.logs import escape
from leasegate.settings import Settings
from leasegate.storage.engine import Row
from leasegate.storage.jobs_sql import JobTable

if TYPE_CHECKING:
    from leasegate.actors.event_stream import EventHub
    from leasegate.actors.ledger import LedgerRef

V = TypeVar("V")


@dataclass(frozen=True)
class JobKind:
    """One channel's jobs as the code both queues share reads them (no channel is
    ever picked by a string: each queue hands its own kind to what it shares); the
    job as the API shows it is its turn's :meth:`QueueTurn.view`."""

    actor: str  # the queue actor's name ("tasks")
    channel: Channel  # names the job's holds and events
    noun: str  # "task", "query": in messages
    id_prefix: str  # of the ids the server chooses ("t-...")
    id_column: str  # of the job's row
    settled: tuple[str, ...]  # where a waiting read (GET ?wait_seconds) returns
    terminal: tuple[str, ...]  # where its hold is settled
    jobs: JobTable  # its table
    not_found: type[LeasegateError]  # 404 of its channel


class QueueTurn(Turn, Generic[V]):
    """The runtime's turn, and what both queues keep across turns: the channel's
    kind, the settings, the history recorder, the ledger's settle notices and the
    turn's dry lease filters."""

    def __init__(self, kind: JobKind, settings: Settings, *,
                 ledger: LedgerRef | None = None, events: EventHub | None = None) -> None:
        super().__init__(kind.actor)
        self.kind = kind
        self.settings = settings
        self.history = JobHistory(self, kind.channel, kind.id_column, events)
        # A job with max_cost that ends is settled by the ledger after the commit.
        self.settle = SettleNotices(self, kind, ledger)
        self.dry = DryFilters()
        self.sites = SiteGate(kind.channel)  # paused and throttled sites (see queue/sites.py)

    def view(self, row: Row) -> V:
        """The job of ``row`` as the API shows it (each queue's turn says how)."""
        raise NotImplementedError

    def left_for_others(self) -> set[Hashable]:
        """A site whose new work this turn's own parked leases took to the last job is
        not announced (``leases.left_for_others``); with a site paused or throttled,
        everything is (each gateway admits its own throttled leases)."""
        if not self.sites.idle:
            return super().left_for_others()
        return left_for_others(self.announce, self.dry, self.number)

    def visible(self, job_id: str, tenant: str | None) -> Row:
        """The job, if it exists and the tenant (None: any, the admin) may see it."""
        row = self.kind.jobs.get(self.conn, job_id)
        if row is None or (tenant is not None and row["tenant"] != tenant):
            raise self.kind.not_found(f"no {self.kind.noun} {job_id}")
        return row

    def retry_expiry(self, row: Row) -> float:
        """When the job of ``row``, retried by an operator, expires unserved: its
        channel's TTL (each queue's turn says how it counts)."""
        raise NotImplementedError

    def kept_errors(self, row: Row) -> str | None:
        """The ``errors`` (``leasegate.actors.attempts``) the job of ``row`` keeps when an
        operator retries it: those it has (each channel may add the one it ends with)."""
        errors: str | None = row["errors"]
        return errors

    def current(self, job_id: str) -> Row:
        """The job's row, read again after a change this turn made (it exists)."""
        row = self.kind.jobs.get(self.conn, job_id)
        assert row is not None, job_id
        return row


class SettleNotices:
    """A queue actor's way to tell the ledger that jobs ended, once they are committed.

    A queue actor calls :meth:`ended` inside the turn with the job's row after a
    change; a terminal job with ``max_cost`` is settled by the ledger after the commit,
    never waited for (the queues ask the ledger, never the reverse). A notice lost to a
    full inbox, a crash after the commit or a ledger already closed at shutdown is
    repaired by the ledger's recovery, which settles the hold from the job's row (see
    ``leasegate.actors.ledger``)."""

    def __init__(self, turn: Turn, kind: JobKind, ledger: LedgerRef | None) -> None:
        self.turn = turn
        self.kind = kind
        self.ledger = ledger  # None: no ledger (an actor driven alone, in tests)

    def ended(self, row: Row | None) -> None:
        """Call with the job's row after a change; a terminal job with ``max_cost`` is
        settled after the commit."""
        if self.ledger is None or row is None or row["max_cost"] is None:
            return
        status = row["status"]
        if status not in self.kind.terminal:
            return
        channel, job_id = self.kind.channel, row[self.kind.id_column]
        self.turn.tell_after_commit(
            self.ledger, Settle(channel, job_id, status, row["cost"]),
            f"settle of {channel} {escape(job_id)} not delivered; recovery will settle it")
