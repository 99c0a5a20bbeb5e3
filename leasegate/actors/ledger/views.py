"""Replies of the ledger actor, built from its rows; rendered to JSON at the HTTP edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from leasegate.actors.views import Instant, Receipt
from leasegate.storage.engine import Row


@dataclass(frozen=True)
class AccountView:
    """``available`` can be spent now, ``held`` sits in open holds, ``balance`` is both."""

    account: str
    available: int = field(metadata={"description": "What can be spent now."})
    held: int = field(metadata={"description": "What sits in this account's open holds."})
    balance: int = field(metadata={"description": "available + held."})


@dataclass(frozen=True)
class EntryView:
    """One journal line of an account: ``amount`` is signed, for this account."""

    txn_id: int
    kind: Literal["credit", "hold", "charge", "refund"]
    amount: int = field(metadata={"description": "Signed, for this account."})
    ref: str
    memo: str | None
    created_at: Instant


@dataclass(frozen=True)
class HoldView:
    """A job's hold: ``ref`` is the job id (of ``channel``)."""

    ref: str = field(metadata={"description": "The job id."})
    channel: Literal["task", "query"]
    account: str
    amount: int
    status: Literal["open", "settled"]
    charged: int | None
    refunded: int | None
    created_at: Instant
    settled_at: Instant | None


@dataclass(frozen=True)
class HoldPlaced(Receipt):
    """What a hold request did: ``created`` False when the job id was held before
    (a replay: nothing moved), ``status`` the hold's state (``settled`` for a job id
    settled before, whose hold may be gone by retention)."""

    job_id: str


@dataclass(frozen=True)
class AuditCheck:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class AuditReport:
    ok: bool
    checks: tuple[AuditCheck, ...]

    def failing(self) -> tuple[str, ...]:
        return tuple(check.name for check in self.checks if not check.ok)


def account_view(name: str, row: Row | None) -> AccountView:
    available = 0 if row is None else int(row["balance"])
    held = 0 if row is None else int(row["held"])
    return AccountView(name, available, held, available + held)


def entry_view(row: Row) -> EntryView:
    return EntryView(row["txn_id"], row["kind"], row["amount"], row["ref"], row["memo"],
                     row["created_at"])


def hold_view(row: Row) -> HoldView:
    return HoldView(row["job_id"], row["channel"], row["account"], row["amount"],
                    row["status"], row["charged"], row["refunded"], row["created_at"],
                    row["settled_at"])
