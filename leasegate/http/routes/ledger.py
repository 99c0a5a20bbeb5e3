"""Routes of the ledger: credits (admin), accounts and their journal, holds, the audit.

A client key reads its own tenant's account only; another account is 404
(never 403), and so are the system accounts (``@world``, ``@holds``,
``@revenue``), which only an admin reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, StringConstraints
from quart import Blueprint
from quart_schema import validate_querystring, validate_request

from leasegate.actors.ledger.accounts import Credit, GetAccount, ListEntries
from leasegate.actors.ledger.audit import RunAudit
from leasegate.actors.ledger.holds import ListHolds
from leasegate.actors.ledger.views import AccountView, AuditReport, EntryView, HoldView
from leasegate.actors.pages import Paged
from leasegate.errors import InvalidRequest, NotFound
from leasegate.http.models.jobs import Id, ListArgs, Strict, page
from leasegate.http.models.numbers import INTEGRAL
from leasegate.http.models.replies import answers
from leasegate.http.server.auth import allow, require_tenant
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json
from leasegate.ids import ID_RULE, is_id
from leasegate.settings import MAX_AMOUNT

bp = Blueprint("ledger", __name__)


class CreditBody(Strict):
    amount: Annotated[StrictInt, Field(gt=0, le=MAX_AMOUNT), INTEGRAL]  # minor units
    ref: Id
    memo: Annotated[str, StringConstraints(max_length=256)] | None = None


class HoldListArgs(ListArgs):
    account: Id | None = Field(default=None, description="Only this account's holds.")
    status: Literal["open", "settled"] | None = Field(
        default=None, description="Only open holds, or only settled ones.")


def _readable(account: str) -> str:
    """The account, if the caller may read it (admin: any; client: its tenant's)."""
    if not is_id(account):
        raise InvalidRequest(f"account must be {ID_RULE}")
    _, tenant = require_tenant("client")
    if tenant is not None and tenant != account:
        raise NotFound(f"no account {account}")
    return account


@bp.post("/v1/ledger/accounts/<account>/credit")
@allow("admin")
@validate_request(CreditBody)
@answers(AccountView, 409, 422)
async def credit(account: str, data: CreditBody) -> Any:
    """Credit a tenant's account (admin): ``@world -> account``, once per ``ref``."""
    if not is_id(account):
        raise InvalidRequest(f"account must be {ID_RULE}")
    return to_json(await system().ledger.ask(
        Credit(account, data.amount, data.ref, data.memo)))


@bp.get("/v1/ledger/accounts/<account>")
@allow("client")
@answers(AccountView)
async def get_account(account: str) -> Any:
    """An account: available, held, balance (client: its own tenant's only)."""
    return to_json(await system().ledger.ask(GetAccount(_readable(account))))


@bp.get("/v1/ledger/accounts/<account>/entries")
@allow("client")
@validate_querystring(ListArgs)
@answers(Paged[EntryView])
async def list_entries(account: str, query_args: ListArgs) -> Any:
    """An account's journal lines, newest first (client: its own tenant's only)."""
    return to_json(await system().ledger.ask(
        ListEntries(_readable(account), page(query_args))))


@bp.get("/v1/ledger/holds")
@allow("admin")
@validate_querystring(HoldListArgs)
@answers(Paged[HoldView])
async def list_holds(query_args: HoldListArgs) -> Any:
    """Holds, newest first, by account and status (admin)."""
    return to_json(await system().ledger.ask(
        ListHolds(query_args.account, query_args.status, page(query_args))))


@bp.get("/v1/ledger/audit")
@allow("admin")
@answers(AuditReport)
async def run_audit() -> Any:
    """Check the books now (admin): every check, with what it found."""
    return to_json(await system().ledger.ask(RunAudit()))
