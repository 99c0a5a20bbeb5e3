"""Request and response models of the ledger routes (validation and ``/openapi.json``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StrictInt, StringConstraints

from leasegate.http.models.jobs import Id, ListArgs, Strict, Timestamp
from leasegate.http.models.numbers import INTEGRAL
from leasegate.http.models.replies import ListPage
from leasegate.settings import MAX_AMOUNT


class CreditBody(Strict):
    amount: Annotated[StrictInt, Field(gt=0, le=MAX_AMOUNT), INTEGRAL]  # minor units
    ref: Id
    memo: Annotated[str, StringConstraints(max_length=256)] | None = None


class HoldListArgs(ListArgs):
    account: Id | None = Field(default=None, description="Only this account's holds.")
    status: Literal["open", "settled"] | None = Field(
        default=None, description="Only open holds, or only settled ones.")


class AccountObject(BaseModel):
    account: str
    available: int = Field(description="What can be spent now.")
    held: int = Field(description="What sits in this account's open holds.")
    balance: int = Field(description="available + held.")


class EntryObject(BaseModel):
    txn_id: int
    kind: Literal["credit", "hold", "charge", "refund"]
    amount: int = Field(description="Signed, for this account.")
    ref: str
    memo: str | None
    created_at: Timestamp


class EntryPage(ListPage):
    items: list[EntryObject]


class HoldObject(BaseModel):
    ref: str = Field(description="The job id.")
    channel: Literal["task", "query"]
    account: str
    amount: int
    status: Literal["open", "settled"]
    charged: int | None
    refunded: int | None
    created_at: Timestamp
    settled_at: Timestamp | None


class HoldPage(ListPage):
    items: list[HoldObject]


class AuditCheckObject(BaseModel):
    name: str
    ok: bool
    detail: str


class AuditObject(BaseModel):
    ok: bool
    checks: list[AuditCheckObject]
