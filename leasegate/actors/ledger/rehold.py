"""A retried job's money: its hold placed again, each message followed by its handler.

A job's hold is named by its job; once settled it is never held again, except when an
operator retries the job (a new attempt is new work, paid for as the first was): then
the jobs facade asks for :class:`HoldAgain` before the job is requeued, and undoes it
with a ``Settle`` of nothing charged should the requeue be refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasegate.actors.channels import Channel
from leasegate.actors.checks import MAX_AMOUNT, check_choice, check_id, check_int
from leasegate.actors.ledger.holds import check_tenant_account
from leasegate.actors.ledger.ref import Ledger
from leasegate.actors.ledger.turn import LEDGER, LedgerTurn
from leasegate.actors.ledger.views import HoldPlaced
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import InsufficientFunds
from leasegate.storage import ledger_sql as sql
from leasegate.storage import operator_sql


@dataclass(frozen=True)
class HoldAgain(Ask[Ledger, HoldPlaced]):
    """``account -> @holds`` again for a retried job whose hold was settled (an open
    hold is kept as it is: ``created`` False). 6007 when the account is short."""

    channel: Channel
    job_id: str
    account: str
    amount: int

    def check(self) -> None:
        check_choice("channel", self.channel, Channel)
        check_id("job_id", self.job_id)
        check_tenant_account("account", self.account)
        check_int("amount", self.amount, 0, MAX_AMOUNT)


@LEDGER.on(HoldAgain)
def hold_again(turn: LedgerTurn, m: HoldAgain) -> HoldPlaced:
    conn, now = turn.conn, turn.now
    row = sql.hold(conn, m.channel, m.job_id)
    if row is not None and row["status"] == "open":
        return HoldPlaced(m.job_id, "open", created=False)
    turn.within_max_amount("max_cost", m.amount)
    found = sql.account(conn, m.account)
    available = 0 if found is None else int(found["balance"])
    if available < m.amount:
        raise InsufficientFunds(f"account {m.account} has {available} available; "
                                f"max_cost {m.amount} cannot be held for the retry")
    operator_sql.reopen_hold(conn, m.channel, m.job_id, m.account, m.amount, now)
    sql.add_held(conn, m.account, m.amount, now)
    if m.amount:
        sql.post(conn, "hold", m.job_id, f"hold for {m.channel} {m.job_id} (retried)", now,
                 [(m.account, -m.amount), ("@holds", m.amount)])
    return HoldPlaced(m.job_id, "open", created=True)


@dataclass(frozen=True)
class HoldsAgain(Batch[Ledger, HoldAgain, HoldPlaced]):
    """A redrive's holds, each answered on its own (a 6007 is that job's alone)."""

    item = HoldAgain


LEDGER.each(HoldsAgain, hold_again)
