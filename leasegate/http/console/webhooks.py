"""The console's webhooks: every tenant's endpoints, an endpoint's last 100 deliveries,
and a redelivery (a POST form that sends what ``POST /v1/webhooks/{id}/deliveries/{id}/
retry`` sends)."""

from __future__ import annotations

from quart import Response, request, url_for
from werkzeug.wrappers import Response as Redirect

from leasegate.actors.pages import Page
from leasegate.actors.webhooks.deliveries import ListDeliveries, RetryDelivery
from leasegate.actors.webhooks.endpoints import GetEndpoint, ListEndpoints
from leasegate.http.console.blueprint import back_to, bp, page, session
from leasegate.http.console.pages import PAGE_SIZE, page_offset
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json


@bp.get("/webhooks")
async def webhooks() -> Response:
    found = await system().webhooks.ask(ListEndpoints(Page(limit=PAGE_SIZE, offset=page_offset())))
    return await page("webhooks.html", endpoints=to_json(found))


@bp.get("/webhooks/<endpoint_id>")
async def webhook(endpoint_id: str) -> Response:
    endpoint = await system().webhooks.ask(GetEndpoint(endpoint_id, None))
    deliveries = await system().webhooks.ask(ListDeliveries(endpoint_id, None))
    return await page("webhook.html", endpoint=to_json(endpoint),
                      deliveries=to_json(deliveries))


@bp.post("/webhooks/<endpoint_id>/deliveries/<delivery_id>/retry")
async def redeliver(endpoint_id: str, delivery_id: str) -> Redirect:
    """Send a delivery again now (the same id and body)."""
    form = await request.form
    await system().webhooks.ask(RetryDelivery(endpoint_id, None, delivery_id))
    system().webhook_bell.ring()
    session().notify("ok", f"delivery {delivery_id}: sent again")
    return back_to(form, url_for("console.webhook", endpoint_id=endpoint_id))
