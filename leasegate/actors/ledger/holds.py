"""The ledger's holds, each message followed by its handler: a job's money held
before it is enqueued, released when its submit is refused, settled when it ends.

Amounts are integers in minor units. A job's hold is named by its channel
(``task`` or ``query``) and job id. Accounts whose name starts with ``@`` are
the system's (``@world``, ``@holds``, ``@revenue``): no credit or hold names one.

Once settled, a job's hold is never held again, except when an operator retries the
job (a new attempt is new work, paid for as the first was): then the jobs facade asks
for :class:`HoldAgain` before the job is requeued, and undoes it with a ``Settle`` of
nothing charged should the requeue be refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from leasegate.actors.channels import Channel
from leasegate.actors.checks import (
    MAX_AMOUNT,
    check_choice,
    check_id,
    check_ids,
    check_int,
    check_tenant,
)
from leasegate.actors.ledger import Ledger
from leasegate.actors.ledger.turn import LEDGER, LedgerTurn
from leasegate.actors.ledger.views import HoldPlaced, HoldView, hold_view
from leasegate.actors.pages import Page, Paged, check_page, paged
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask, Tell
from leasegate.errors import IdempotencyConflict, InsufficientFunds
from leasegate.logs import escape
from leasegate.storage import ledger_sql as sql
from leasegate.storage import operator_sql
from leasegate.storage.engine import Connection

log = logging.getLogger("leasegate.ledger")

HoldStatus = Literal["open", "settled"]
JobOutcome = Literal["succeeded", "failed", "canceled", "expired"]


def check_tenant_account(name: str, value: object) -> None:
    """A tenant's account: an id that does not name a system account."""
    check_tenant(name, value)


@dataclass(frozen=True)
class JobHold(Ask[Ledger, HoldPlaced]):
    """A job's hold as the messages that place one name it: the job's channel and id,
    the tenant's account and the amount (``PlaceHold``, ``HoldAgain``)."""

    channel: Channel
    job_id: str
    account: str
    amount: int

    def check(self) -> None:
        check_choice("channel", self.channel, Channel)
        check_id("job_id", self.job_id)
        check_tenant_account("account", self.account)
        check_int("amount", self.amount, 0, MAX_AMOUNT)


OpenRow = Callable[[Connection, str, str, str, int, float], None]


def hold_money(turn: LedgerTurn, m: JobHold, open_row: OpenRow, *,
               retried: bool = False) -> HoldPlaced:
    """``account -> @holds`` for ``m`` now, its row made by ``open_row``: 6010 past
    ``ledger_max_amount``, 6007 when the account's available balance is short."""
    conn, now = turn.conn, turn.now
    turn.within_max_amount("max_cost", m.amount)
    found = sql.account(conn, m.account)
    available = 0 if found is None else int(found["balance"])
    if available < m.amount:
        raise InsufficientFunds(f"account {m.account} has {available} available; "
                                f"max_cost {m.amount} cannot be held"
                                + (" for the retry" if retried else ""))
    open_row(conn, m.channel, m.job_id, m.account, m.amount, now)
    sql.add_held(conn, m.account, m.amount, now)
    if m.amount:
        memo = f"hold for {m.channel} {m.job_id}" + (" (retried)" if retried else "")
        sql.post(conn, "hold", m.job_id, memo, now,
                 [(m.account, -m.amount), ("@holds", m.amount)])
    return HoldPlaced(m.job_id, status="open", created=True)


def hold_scopes(m: JobHold) -> tuple[str, ...]:
    """Across gateways, a hold's check and its write are one for its account (the
    balance is never overdrawn by two at once) and for its job (held once)."""
    return (f"ledger account {m.account}", hold_scope(m.channel, m.job_id))


def hold_scope(channel: object, job_id: object) -> str:
    return f"ledger hold {channel} {job_id}"


@dataclass(frozen=True)
class PlaceHold(JobHold):
    """``account -> @holds`` for a job about to be submitted. 6007 when the account's
    available balance is short, 6010 past ``ledger_max_amount``; idempotent by the job
    (another account or amount under the same job is 6004); a job id settled before is
    never held again, and is 6004 when no job with it exists (its hold was refunded as
    an orphan)."""


@LEDGER.on(PlaceHold)
def hold(turn: LedgerTurn, m: PlaceHold) -> HoldPlaced:
    conn = turn.conn
    row = sql.hold(conn, m.channel, m.job_id)
    if row is not None and (row["account"] != m.account or row["amount"] != m.amount):
        raise IdempotencyConflict(f"{m.channel} {m.job_id} is held with another "
                                  "account or amount")
    settled = sql.was_settled(conn, m.channel, m.job_id)
    if settled and not sql.job_known(conn, m.channel, m.job_id):
        # Refunded as an orphan (its submit never completed) or forgotten past the
        # tombstone's retention: never held again, and never run without a hold.
        raise IdempotencyConflict(f"the hold of {m.channel} {m.job_id} was settled and "
                                  "no job took it; submit under another id")
    if row is not None:
        return HoldPlaced(m.job_id, status=row["status"], created=False)
    if settled:
        return HoldPlaced(m.job_id, status="settled", created=False)  # never held again
    return hold_money(turn, m, sql.open_hold)


@dataclass(frozen=True)
class PlaceHolds(Batch[Ledger, PlaceHold, HoldPlaced]):
    """The holds of one batch submit, in request order, in one commit: each item is
    answered as its :class:`PlaceHold` would be (a 6007 or 6010 is that item's alone)."""

    item = PlaceHold


LEDGER.each(PlaceHolds, hold)
LEDGER.locks(PlaceHold, hold_scopes)
LEDGER.locks_each(PlaceHolds, hold_scopes)


@dataclass(frozen=True)
class ReleaseHold(Ask[Ledger, bool]):
    """The submit this hold was placed for was refused: refund it now (True if it did).
    A hold that a job with this id and the same tenant and amount exists for is kept."""

    channel: Channel
    job_id: str

    def check(self) -> None:
        check_choice("channel", self.channel, Channel)
        check_id("job_id", self.job_id)


@LEDGER.on(ReleaseHold)
def release(turn: LedgerTurn, m: ReleaseHold) -> bool:
    conn, now = turn.conn, turn.now
    row = sql.hold(conn, m.channel, m.job_id)
    if row is None or row["status"] != "open":
        return False
    job = sql.job_state(conn, m.channel, m.job_id)
    if (job is not None and job["tenant"] == row["account"]
            and job["max_cost"] == row["amount"]):
        return False  # a job (an identical concurrent submit) holds it: settled later
    if not sql.drop_open_hold(conn, m.channel, m.job_id):
        return False
    amount, account = int(row["amount"]), str(row["account"])
    sql.add_held(conn, account, -amount, now)
    if amount:
        sql.post(conn, "refund", m.job_id, f"released: the submit of {m.channel} "
                 f"{m.job_id} was refused", now, [("@holds", -amount), (account, amount)])
    log.info("hold released, its submit was refused: %s %s", m.channel, escape(m.job_id))
    return True


LEDGER.locks(ReleaseHold, lambda m: (hold_scope(m.channel, m.job_id),))


@dataclass(frozen=True)
class Settle(Tell[Ledger]):
    """A job ended (sent by its queue actor after the commit): charge what it delivered,
    capped at the hold, and refund the rest; at most once per job."""

    channel: Channel
    job_id: str
    outcome: JobOutcome
    cost: int | None = None

    def check(self) -> None:
        check_choice("channel", self.channel, Channel)
        check_id("job_id", self.job_id)
        check_choice("outcome", self.outcome, JobOutcome)
        check_int("cost", self.cost, 0, MAX_AMOUNT, optional=True)


@LEDGER.on(Settle)
def settle_ended(turn: LedgerTurn, m: Settle) -> None:
    settle(turn, m.channel, m.job_id, m.outcome, m.cost)


def charge_for(amount: int, outcome: str, cost: int | None) -> int:
    """What a job that ended with ``outcome`` pays of its hold of ``amount``."""
    if cost is None:
        return amount if outcome == "succeeded" else 0
    return min(cost, amount)


def settle(turn: LedgerTurn, channel: Channel, job_id: str, outcome: str,
           cost: int | None) -> bool:
    """Resolve an open hold; False (nothing changed) if there is none open."""
    conn, now = turn.conn, turn.now
    row = sql.hold(conn, channel, job_id)
    if row is None or row["status"] != "open":
        return False
    amount, account = int(row["amount"]), str(row["account"])
    charge = charge_for(amount, outcome, cost)
    refund = amount - charge
    if not sql.close_hold(conn, channel, job_id, charge, refund, outcome, now):
        return False
    sql.add_held(conn, account, -amount, now)
    memo = f"{channel} {job_id} {outcome}"
    if charge:
        sql.post(conn, "charge", job_id, memo, now, [("@holds", -charge), ("@revenue", charge)])
    if refund:
        sql.post(conn, "refund", job_id, memo, now, [("@holds", -refund), (account, refund)])
    turn.settled(channel, job_id, outcome, charge, refund)
    return True


@dataclass(frozen=True)
class HoldsOf(Ask[Ledger, tuple[HoldView, ...]]):
    """The holds of these jobs that the ledger still has (for the jobs' ``billing``)."""

    channel: Channel
    job_ids: tuple[str, ...]

    def check(self) -> None:
        check_choice("channel", self.channel, Channel)
        check_ids("job_ids", self.job_ids, most=500, optional=False)


@LEDGER.on(HoldsOf)
def holds_of(turn: LedgerTurn, m: HoldsOf) -> tuple[HoldView, ...]:
    if not m.job_ids:
        return ()
    return tuple(hold_view(r) for r in sql.holds_of(turn.conn, m.channel, list(m.job_ids)))


@dataclass(frozen=True)
class ListHolds(Ask[Ledger, Paged[HoldView]]):
    account: str | None = None
    status: HoldStatus | None = None
    page: Page = Page()

    def check(self) -> None:
        check_id("account", self.account, optional=True)
        check_choice("status", self.status, HoldStatus, optional=True)
        check_page(self.page)


@LEDGER.on(ListHolds)
def list_holds(turn: LedgerTurn, m: ListHolds) -> Paged[HoldView]:
    page = m.page
    return paged(sql.page_holds(turn.conn, m.account, m.status, page.limit, page.offset),
                 hold_view, page)


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
