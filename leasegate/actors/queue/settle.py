"""What a queue tells the ledger once a job with a hold has ended.

A queue actor calls :meth:`SettleNotices.ended` inside the turn with the job's row
after a change; a terminal job with ``max_cost`` is settled by the ledger after
the commit, never waited for (the queues ask the ledger, never the reverse). A
notice lost to a full inbox, a crash after the commit or a ledger already closed
at shutdown is repaired by the ledger's recovery, which settles the hold from
the job's row (see ``leasegate.actors.ledger``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leasegate.actors.ledger.holds import Settle
from leasegate.actors.runtime.turn import Turn
from leasegate.logs import escape
from leasegate.storage.engine import Row

if TYPE_CHECKING:
    from leasegate.actors.ledger.ref import LedgerRef
    from leasegate.actors.queue.turn import JobKind


class SettleNotices:
    """A queue actor's way to tell the ledger that jobs ended, once they are committed."""

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
