"""The turn context both queue actors' handlers take, and the descriptor of a
channel's table that the shared handlers read through."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from leasegate.actors.channels import Channel
from leasegate.actors.queue.history import JobHistory
from leasegate.actors.queue.leases import DryFilters, left_for_others
from leasegate.actors.queue.settle import SettleNotices
from leasegate.actors.queue.sites import SiteGate
from leasegate.actors.runtime.turn import Turn
from leasegate.errors import LeasegateError
from leasegate.settings import Settings
from leasegate.storage.engine import Connection, Row

if TYPE_CHECKING:
    from leasegate.actors.ledger.ref import LedgerRef
    from leasegate.actors.queue.event_hub import EventHub

V = TypeVar("V")


@dataclass(frozen=True)
class JobKind(Generic[V]):
    """One channel's jobs as the code both queues share reads them (no channel is
    ever picked by a string: each queue hands its own kind to what it shares)."""

    actor: str  # the queue actor's name ("tasks")
    channel: Channel  # names the job's holds and events
    noun: str  # "task", "query": in messages
    id_prefix: str  # of the ids the server chooses ("t-...")
    id_column: str  # of the job's row
    settled: tuple[str, ...]  # where a waiting read (GET ?wait_seconds) returns
    terminal: tuple[str, ...]  # where its hold is settled
    get: Callable[[Connection, str], Row | None]
    view: Callable[[Row], V]  # the job as the API shows it
    not_found: Callable[[str], LeasegateError]  # 404 of its channel


class QueueTurn(Turn, Generic[V]):
    """The runtime's turn, and what both queues keep across turns: the channel's
    kind, the settings, the history recorder, the ledger's settle notices and the
    turn's dry lease filters."""

    def __init__(self, kind: JobKind[V], settings: Settings, *,
                 ledger: LedgerRef | None = None, events: EventHub | None = None) -> None:
        super().__init__(kind.actor)
        self.kind = kind
        self.settings = settings
        self.history = JobHistory(self, kind.channel, kind.id_column, events)
        # A job with max_cost that ends is settled by the ledger after the commit.
        self.settle = SettleNotices(self, kind, ledger)
        self.dry = DryFilters()
        self.sites = SiteGate(kind.channel)  # paused and throttled sites (see queue/sites.py)

    def left_for_others(self) -> set[Hashable]:
        """A site whose new work this turn's own parked leases took to the last job is
        not announced (``leases.left_for_others``); with a site paused or throttled,
        everything is (each gateway admits its own throttled leases)."""
        if not self.sites.idle:
            return super().left_for_others()
        return left_for_others(self.announce, self.dry, self.number)

    def visible(self, job_id: str, tenant: str | None) -> Row:
        """The job, if it exists and the tenant (None: any, the admin) may see it."""
        row = self.kind.get(self.conn, job_id)
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
        row = self.kind.get(self.conn, job_id)
        assert row is not None, job_id
        return row
