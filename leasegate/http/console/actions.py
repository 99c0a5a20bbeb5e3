"""The console's forms (POST): reclaim, credit, create and revoke keys.

Each sends the same actor message as its ``/v1`` route; the guard has checked
the session and the CSRF token. Success redirects (303) to the page the form
came from with a notice; a refusal renders the error page with the
domain error's status and message.
"""

from __future__ import annotations

from typing import Any

from quart import Response, request, url_for
from werkzeug.wrappers import Response as Redirect

from leasegate.actors.keys.records import CreateKey, RevokeKey, sites_typed
from leasegate.actors.ledger.accounts import Credit
from leasegate.actors.tasks.control import ReclaimTask
from leasegate.errors import InvalidRequest
from leasegate.http.console.blueprint import (
    authenticator,
    back_to,
    bp,
    form_field,
    page,
    principal,
    session,
)
from leasegate.http.console.pages import keys_page
from leasegate.http.models.numbers import whole_number
from leasegate.http.routes.operator import signed
from leasegate.http.server.context import system
from leasegate.settings import MAX_AMOUNT


def _whole(form: Any, name: str) -> int:
    found = whole_number(form_field(form, name) or "", MAX_AMOUNT)
    if found is None:
        raise InvalidRequest(f"{name} must be a whole number in digits 0-9, at most "
                             f"{MAX_AMOUNT}")
    return found


@bp.post("/tasks/<task_id>/reclaim")
async def reclaim(task_id: str) -> Redirect:
    """Resolve a stale task: requeue, succeeded or failed, with a reason (required)."""
    form = await request.form
    who = principal()
    done = await system().tasks.ask(ReclaimTask(
        task_id, form_field(form, "action"), form_field(form, "reason"),  # type: ignore[arg-type]
        by=signed(who)))
    # From where it was (stale) to where it is: "succeeded → succeeded" said nothing.
    session().notify("ok", f"task {task_id}: stale → {done.status} (reclaimed: "
                           f"{form.get('action')})")
    return back_to(form, url_for("console.task", task_id=task_id))


@bp.post("/ledger/credit")
async def credit() -> Redirect:
    form = await request.form
    account = form_field(form, "account") or ""
    reply = await system().ledger.ask(Credit(
        account, _whole(form, "amount"), form_field(form, "ref") or "",
        form_field(form, "memo", required=False)))
    session().notify("ok", f"credited {account}: available {reply.available}, "
                           f"balance {reply.balance}")
    return back_to(form, url_for("console.ledger", account=account))


@bp.post("/keys")
async def create_key() -> Response | Redirect:
    """A new key; its secret is shown on the next page only (then gone)."""
    form = await request.form
    try:
        created = await system().keys.ask(CreateKey(
            form_field(form, "role"),  # type: ignore[arg-type]
            form_field(form, "name") or "", form_field(form, "tenant", required=False),
            sites_typed(form_field(form, "sites", required=False))))
    except InvalidRequest as refused:  # the form again, with its values and why
        return await keys_page(refused.status, refused.message, form)
    session().notify("secret", f"{created.role} key {created.name} ({created.key_id}); "
                               f"its secret, shown this once: {created.key}")
    return back_to(form, url_for("console.keys"))


@bp.post("/keys/<key_id>/revoke")
async def revoke_key(key_id: str) -> Response | Redirect:
    """Asks first (a page with the button that revokes): a revoked key is refused from
    its next request on, and cannot be brought back."""
    form = await request.form
    if form.get("confirm") != "yes":
        return await page("confirm.html", title=f"Revoke key {key_id}?", message=(
            f"Every caller using key {key_id} is refused from its next request on; a "
            "revoked key cannot be brought back."), action=url_for(
                "console.revoke_key", key_id=key_id), fields={"back": form.get("back", "")},
            button="Revoke", back=url_for("console.keys"))
    revoked = await system().keys.ask(RevokeKey(key_id))
    authenticator().forget(key_id)
    session().notify("ok", f"key {revoked.name} ({key_id}) revoked")
    return back_to(form, url_for("console.keys"))
