"""The ledger's turn context and handler registry."""

from __future__ import annotations

from collections.abc import Mapping

from leasegate.actors.channels import Channel, RecordSettled
from leasegate.actors.ledger import Ledger
from leasegate.actors.ledger.views import AuditReport
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.turn import Receiver, Turn
from leasegate.errors import LedgerLimit
from leasegate.logs import escape
from leasegate.settings import Settings


class LedgerTurn(Turn):
    """The runtime's turn, the ledger's settings and bounds, and the queues it tells
    that a job was settled."""

    def __init__(self, settings: Settings,
                 queues: Mapping[Channel, Receiver[RecordSettled]]) -> None:
        super().__init__("ledger")
        self.settings = settings
        self.queues = queues  # channel → the queue actor that records a settlement
        self.last_audit: AuditReport | None = None  # set on the trio thread only
        # When this gateway began serving (wall seconds; set at open). A caller cannot
        # retry a submit while the gateway is down, so an orphan hold's age counts only
        # from then: a crash never shortens a caller's window to retry.
        self.up_since = 0.0

    def settled(self, channel: Channel, job_id: str, outcome: str, charged: int,
                refunded: int) -> None:
        """After the commit, tell the job's queue it was settled (for its history)."""
        queue = self.queues.get(channel)
        if queue is None:
            return
        self.tell_after_commit(
            queue, RecordSettled(job_id, outcome, charged, refunded),
            f"settled event of {channel} {escape(job_id)} not recorded (the queue's inbox "
            "is full or closed); its billing still shows it")

    def within_max_amount(self, name: str, amount: int) -> None:
        """6010 past ``ledger_max_amount`` (see ``Settings.ledger_max_balance`` for why
        the bounds keep every sum in 64-bit integers)."""
        most = self.settings.ledger_max_amount
        if amount > most:
            raise LedgerLimit(f"{name} {amount} is over ledger_max_amount ({most})")


LEDGER = Handlers(Ledger, LedgerTurn)
"""What the ledger does with each message (filled in by its message modules)."""
