"""Messages of the ledger actor: what the HTTP layer, the queue actors and tests may send.

Amounts are integers in minor units. A job's hold is named by its channel
(``task`` or ``query``) and job id. Accounts whose name starts with ``@`` are
the system's (``@world``, ``@holds``, ``@revenue``): no credit or hold names one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.batches import Batch
from leasegate.actors.checks import (
    MAX_AMOUNT,
    check_choice,
    check_id,
    check_ids,
    check_int,
    check_page,
    check_text,
)
from leasegate.actors.ledger_views import (
    AccountView,
    AuditReport,
    Channel,
    EntryView,
    HoldPlaced,
    HoldView,
)
from leasegate.actors.mailbox import Ask, Tell
from leasegate.actors.pages import Page, Paged
from leasegate.errors import InvalidRequest

HoldStatus = Literal["open", "settled"]
JobOutcome = Literal["succeeded", "failed", "canceled", "expired"]
MAX_MEMO = 256


def check_tenant_account(name: str, value: object) -> None:
    """A tenant's account: an id that does not name a system account."""
    check_id(name, value)
    assert isinstance(value, str)
    if value.startswith("@"):
        raise InvalidRequest(f"{name} {value!r} is a system account (names starting with @)")


@dataclass(frozen=True)
class Credit(Ask[AccountView]):
    """``@world -> account``, once per ``ref``: the same ref again with the same account
    and amount changes nothing; with another one it is 6004. 6010 past
    ``ledger_max_amount``, or when the money ever credited would pass
    ``ledger_max_balance``."""

    account: str
    amount: int
    ref: str
    memo: str | None = None

    def check(self) -> None:
        check_tenant_account("account", self.account)
        check_int("amount", self.amount, 1, MAX_AMOUNT)
        check_id("ref", self.ref)
        check_text("memo", self.memo, optional=True, most=MAX_MEMO)


@dataclass(frozen=True)
class GetAccount(Ask[AccountView]):
    """An account (all zero if nothing ever moved in it)."""

    account: str

    def check(self) -> None:
        check_id("account", self.account)


@dataclass(frozen=True)
class ListEntries(Ask[Paged[EntryView]]):
    account: str
    page: Page = Page()

    def check(self) -> None:
        check_id("account", self.account)
        check_page(self.page)


@dataclass(frozen=True)
class ListAccounts(Ask[Paged[AccountView]]):
    """Every account, tenants' and the system's, newest first (the console's list)."""

    page: Page = Page()

    def check(self) -> None:
        check_page(self.page)


@dataclass(frozen=True)
class ListHolds(Ask[Paged[HoldView]]):
    account: str | None = None
    status: HoldStatus | None = None
    page: Page = Page()

    def check(self) -> None:
        check_id("account", self.account, optional=True)
        if self.status is not None:
            check_choice("status", self.status, HoldStatus)
        check_page(self.page)


@dataclass(frozen=True)
class PlaceHold(Ask[HoldPlaced]):
    """``account -> @holds`` for a job about to be submitted. 6007 when the account's
    available balance is short, 6010 past ``ledger_max_amount``; idempotent by the job
    (another account or amount under the same job is 6004); a job id settled before is
    never held again, and is 6004 when no job with it exists (its hold was refunded as
    an orphan)."""

    channel: Channel
    job_id: str
    account: str
    amount: int

    def check(self) -> None:
        check_choice("channel", self.channel, Channel)
        check_id("job_id", self.job_id)
        check_tenant_account("account", self.account)
        check_int("amount", self.amount, 0, MAX_AMOUNT)


@dataclass(frozen=True)
class PlaceHolds(Batch[PlaceHold, HoldPlaced]):
    """The holds of one batch submit, in request order, in one commit: each item is
    answered as its :class:`PlaceHold` would be (a 6007 or 6010 is that item's alone)."""

    item = PlaceHold


@dataclass(frozen=True)
class ReleaseHold(Ask[bool]):
    """The submit this hold was placed for was refused: refund it now (True if it did).
    A hold that a job with this id and the same tenant and amount exists for is kept."""

    channel: Channel
    job_id: str

    def check(self) -> None:
        check_choice("channel", self.channel, Channel)
        check_id("job_id", self.job_id)


@dataclass(frozen=True)
class Settle(Tell):
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


@dataclass(frozen=True)
class HoldsOf(Ask[tuple[HoldView, ...]]):
    """The holds of these jobs that the ledger still has (for the jobs' ``billing``)."""

    channel: Channel
    job_ids: tuple[str, ...]

    def check(self) -> None:
        check_choice("channel", self.channel, Channel)
        check_ids("job_ids", self.job_ids, most=500, optional=False)


@dataclass(frozen=True)
class RunAudit(Ask[AuditReport]):
    """Check the books now: balances sum to zero, ``@holds`` equals the open holds,
    cached balances equal the journal, settled holds are charged + refunded in full."""
