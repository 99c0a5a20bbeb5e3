"""A retried job's money: its hold placed again, each message followed by its handler.

A job's hold is named by its job; once settled it is never held again, except when an
operator retries the job (a new attempt is new work, paid for as the first was): then
the jobs facade asks for :class:`HoldAgain` before the job is requeued, and undoes it
with a ``Settle`` of nothing charged should the requeue be refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasegate.actors.ledger.holds import JobHold, hold_money, hold_scopes
from leasegate.actors.ledger.ref import Ledger
from leasegate.actors.ledger.turn import LEDGER, LedgerTurn
from leasegate.actors.ledger.views import HoldPlaced
from leasegate.actors.runtime.batches import Batch
from leasegate.storage import ledger_sql as sql
from leasegate.storage import operator_sql


@dataclass(frozen=True)
class HoldAgain(JobHold):
    """``account -> @holds`` again for a retried job whose hold was settled (an open
    hold is kept as it is: ``created`` False). 6007 when the account is short."""


@LEDGER.on(HoldAgain)
def hold_again(turn: LedgerTurn, m: HoldAgain) -> HoldPlaced:
    row = sql.hold(turn.conn, m.channel, m.job_id)
    if row is not None and row["status"] == "open":
        return HoldPlaced(m.job_id, status="open", created=False)
    return hold_money(turn, m, operator_sql.reopen_hold, retried=True)


@dataclass(frozen=True)
class HoldsAgain(Batch[Ledger, HoldAgain, HoldPlaced]):
    """A redrive's holds, each answered on its own (a 6007 is that job's alone)."""

    item = HoldAgain


LEDGER.each(HoldsAgain, hold_again)
LEDGER.locks(HoldAgain, hold_scopes)
LEDGER.locks_each(HoldsAgain, hold_scopes)
