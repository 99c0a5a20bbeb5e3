"""The ledger's accounts, each message followed by its handler: credits (the only way
money enters) and the reads of accounts and their journal."""

from __future__ import annotations

from dataclasses import dataclass

from leasegate.actors.checks import MAX_AMOUNT, check_id, check_int, check_text
from leasegate.actors.ledger import Ledger
from leasegate.actors.ledger.holds import check_tenant_account
from leasegate.actors.ledger.turn import LEDGER, LedgerTurn
from leasegate.actors.ledger.views import AccountView, EntryView, account_view, entry_view
from leasegate.actors.pages import ListPage, Page, Paged, check_page, paged
from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import IdempotencyConflict, LedgerLimit
from leasegate.storage import ledger_sql as sql

MAX_MEMO = 256


@dataclass(frozen=True)
class Credit(Ask[Ledger, AccountView]):
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


@LEDGER.on(Credit)
def credit(turn: LedgerTurn, m: Credit) -> AccountView:
    conn, now = turn.conn, turn.now
    existing = sql.credit_by_ref(conn, m.ref)
    if existing is not None:
        if existing["account"] != m.account or existing["amount"] != m.amount:
            raise IdempotencyConflict(f"credit {m.ref} was made with another account "
                                      "or amount")
    else:
        turn.within_max_amount("amount", m.amount)
        _within_max_balance(turn, m)
        txn_id = sql.post(conn, "credit", m.ref, m.memo, now,
                          [("@world", -m.amount), (m.account, m.amount)])
        sql.record_credit(conn, m.ref, m.account, m.amount, txn_id, now)
    return account_view(m.account, sql.account(conn, m.account))


# Across gateways: a ref is credited once, and the account's ceiling is checked with
# the credit that could pass it.
LEDGER.locks(Credit, lambda m: (f"ledger account {m.account}", f"ledger credit {m.ref}"))


def _within_max_balance(turn: LedgerTurn, m: Credit) -> None:
    """Money enters only here: a credit may not take ``@world`` past
    ``-ledger_max_balance``, which bounds every other account and every sum."""
    credited = -sql.balance(turn.conn, "@world")  # an int; a float only in a broken book
    most = turn.settings.ledger_max_balance
    if credited + m.amount > most:
        raise LedgerLimit(f"a credit of {m.amount} would bring the money ever credited "
                          f"(now {credited!r}) over ledger_max_balance ({most})")


@dataclass(frozen=True)
class GetAccount(Ask[Ledger, AccountView]):
    """An account (all zero if nothing ever moved in it)."""

    account: str

    def check(self) -> None:
        check_id("account", self.account)


@LEDGER.on(GetAccount)
def get_account(turn: LedgerTurn, m: GetAccount) -> AccountView:
    return account_view(m.account, sql.account(turn.conn, m.account))


@dataclass(frozen=True)
class ListEntries(Ask[Ledger, Paged[EntryView]]):
    account: str
    page: Page = Page()

    def check(self) -> None:
        check_id("account", self.account)
        check_page(self.page)


@LEDGER.on(ListEntries)
def list_entries(turn: LedgerTurn, m: ListEntries) -> Paged[EntryView]:
    page = m.page
    return paged(sql.entries(turn.conn, m.account, page.limit, page.offset), entry_view, page)


@dataclass(frozen=True)
class ListAccounts(ListPage[Ledger, AccountView]):
    """Every account, tenants' and the system's, newest first (the console's list)."""


@LEDGER.on(ListAccounts)
def list_accounts(turn: LedgerTurn, m: ListAccounts) -> Paged[AccountView]:
    return paged(sql.page_accounts(turn.conn, m.page.limit, m.page.offset),
                 lambda row: account_view(row["account"], row), m.page)
