"""The two job channels, as the ledger and both queues name them.

``Channel`` names a job's channel in the ledger's holds and in job events. A queue
actor's tag derives from :class:`JobQueue`, so the messages every queue takes are
written once, as ``Ask[JobQueue, ...]`` or ``Tell[JobQueue]``: a ``Ref[Tasks]``
and a ``Ref[Queries]`` both take them. :class:`RecordSettled` is the one the
ledger tells a queue; the ledger holds each queue as a ``Receiver`` of it,
and never names the queues' packages (they tell and ask the ledger; it only tells
them back, after its commit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import MAX_AMOUNT, check_choice, check_id, check_int
from leasegate.actors.runtime.mailbox import Tell

Channel = Literal["task", "query"]


class JobQueue:
    """Tags what every queue actor takes (``Tasks`` and ``Queries`` derive from it)."""


SettledOutcome = Literal["succeeded", "failed", "canceled", "expired", "orphaned"]


@dataclass(frozen=True)
class RecordSettled(Tell[JobQueue]):
    """The ledger settled a job's hold (sent after the ledger's commit): the queue
    records it in the job's history."""

    job_id: str
    outcome: str
    charged: int
    refunded: int

    def check(self) -> None:
        check_id("job_id", self.job_id)
        check_choice("outcome", self.outcome, SettledOutcome)
        check_int("charged", self.charged, 0, MAX_AMOUNT)
        check_int("refunded", self.refunded, 0, MAX_AMOUNT)
