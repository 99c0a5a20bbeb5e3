"""Routes of the query channel: requests → query actor messages → JSON."""

from __future__ import annotations

from typing import Any

from quart import Blueprint
from quart_schema import document_response, validate_querystring, validate_request

from leasegate.actors import billing
from leasegate.actors.query_messages import (
    GetQuery,
    LeaseQueries,
    ListQueries,
    QueryResult,
    QueryResults,
    SubmitQuery,
    release_message,
)
from leasegate.http import batches
from leasegate.http.auth import SUBMITTER_ONLY, allow, require, require_tenant, worker_sites
from leasegate.http.context import system
from leasegate.http.json_fields import check_json_field
from leasegate.http.long_poll import long_poll, parked, read_settled
from leasegate.http.models import (
    ErrorEnvelope,
    LeaseBody,
    QueriesSubmitted,
    QueryItems,
    QueryLeases,
    QueryListArgs,
    QueryObject,
    QueryPage,
    QueryResultBody,
    QueryResultItem,
    QueryResultsBody,
    QuerySubmitted,
    SubmitQueriesBody,
    SubmitQueryBody,
    WaitArgs,
    page,
)
from leasegate.http.render import to_json

bp = Blueprint("queries", __name__)


@bp.post("/v1/queries")
@allow("client", admin=False, refusal=SUBMITTER_ONLY)
@validate_request(SubmitQueryBody)
@document_response(QuerySubmitted, 201)
@document_response(ErrorEnvelope, 402)
@document_response(ErrorEnvelope, 409)
async def submit_query(data: SubmitQueryBody) -> tuple[Any, int]:
    """Submit a read-only query (client). Idempotent by ``query_id``."""
    _, tenant = require_tenant("client")
    assert tenant is not None  # a client key (checked by allow)
    sys = system()
    # With max_cost: hold on the tenant's account first (402 when short), then enqueue.
    reply = await billing.submit_query(sys.queries.mailbox, sys.ledger.mailbox,
                                       _submit_message(tenant, data))
    return to_json(reply), 201 if reply.created else 200


def _submit_message(tenant: str, data: SubmitQueryBody, limit: int | None = None) -> SubmitQuery:
    check_json_field("params", data.params, limit)
    return SubmitQuery(tenant=tenant, query_id=data.query_id, site=data.site, kind=data.kind,
                       params=data.params, max_cost=data.max_cost)


@bp.post("/v1/queries/batch")
@allow("client", admin=False, refusal=SUBMITTER_ONLY)
@validate_request(SubmitQueriesBody)
@document_response(QueriesSubmitted)
async def submit_queries(data: SubmitQueriesBody) -> Any:
    """Submit 1–100 queries (client) in one commit, each answered on its own.

    Each item gets the status ``POST /v1/queries`` would give it alone. An id given
    twice in one batch: the second is a replay of the first."""
    _, tenant = require_tenant("client")
    assert tenant is not None  # a client key (checked by allow)
    sys = system()
    limit = sys.settings.max_json_field_bytes  # read once, not per item
    items = batches.each_item(SubmitQueryBody, data.items,
                              lambda body: _submit_message(tenant, body, limit))
    answers = await billing.submit_queries(sys.queries.mailbox, sys.ledger.mailbox, items)
    return batches.reply("query", answers, batches.created)


@bp.post("/v1/queries/results")
@allow("worker")
@validate_request(QueryResultsBody)
@document_response(QueryItems)
async def query_results(data: QueryResultsBody) -> Any:
    """Report 1–100 query results (worker), each fenced and answered on its own."""
    principal = require("worker")
    sys = system()
    limit = sys.settings.max_json_field_bytes  # read once, not per item
    answers = await batches.ask_each(sys.queries.mailbox, QueryResults, batches.each_item(
        QueryResultItem, data.items,
        lambda item: _result_message(item.query_id, data.worker_id, principal.sites, item,
                                     limit)))
    # The settles were told after the queries' commit, so they are ahead of this ask.
    return batches.reply("query", await billing.many_with_billing(sys.ledger.mailbox, "query",
                                                                  answers))


@bp.get("/v1/queries/<query_id>")
@allow("client")
@validate_querystring(WaitArgs)
@document_response(QueryObject)
async def get_query(query_id: str, query_args: WaitArgs) -> Any:
    """A query; with ``wait_seconds`` (0–30), long-poll until it is terminal."""
    _, tenant = require_tenant("client")
    sys = system()
    found = await read_settled(sys.queries.mailbox, GetQuery(query_id, tenant),
                               GetQuery(query_id, tenant, wait=True), query_args.wait_seconds,
                               sys.settings.max_wait_seconds)
    return to_json(await billing.with_billing(sys.ledger.mailbox, found))


@bp.get("/v1/queries")
@allow("client")
@validate_querystring(QueryListArgs)
@document_response(QueryPage)
async def list_queries(query_args: QueryListArgs) -> Any:
    """Queries, newest first (own tenant; admin: all)."""
    _, tenant = require_tenant("client")
    sys = system()
    found = await sys.queries.mailbox.ask(ListQueries(
        tenant=tenant, status=query_args.status, site=query_args.site, kind=query_args.kind,
        page=page(query_args)))
    return to_json(await billing.page_with_billing(sys.ledger.mailbox, "query", found))


@bp.post("/v1/queries/lease")
@allow("worker")
@validate_request(LeaseBody)
@document_response(QueryLeases)
async def lease_queries(data: LeaseBody) -> Any:
    """Long-poll for up to ``max`` queries (worker)."""
    principal = require("worker")
    sys = system()
    message = LeaseQueries(worker_id=data.worker_id, sites=worker_sites(principal, data.sites),
                           max=data.max, request_id=data.request_id,
                           wait=data.wait_seconds > 0)
    with parked(data.wait_seconds, sys.settings.max_wait_seconds):
        items = await long_poll(sys.queries.mailbox, message, data.wait_seconds,
                                sys.settings.max_wait_seconds, release_message, ())
    return {"items": to_json(items)}


@bp.post("/v1/queries/<query_id>/result")
@allow("worker")
@validate_request(QueryResultBody)
@document_response(QueryObject)
@document_response(ErrorEnvelope, 409)
async def query_result(query_id: str, data: QueryResultBody) -> Any:
    """Report a query's outcome with the lease token (worker)."""
    principal = require("worker")
    sys = system()
    done = await sys.queries.mailbox.ask(
        _result_message(query_id, data.worker_id, principal.sites, data))
    # The settle was told after the query's commit, so it is ahead of this ask.
    return to_json(await billing.with_billing(sys.ledger.mailbox, done))


def _result_message(query_id: str, worker_id: str, sites: tuple[str, ...] | None,
                    body: QueryResultBody | QueryResultItem,
                    limit: int | None = None) -> QueryResult:
    """A result, single or one item of a batch, as the query actor takes it."""
    check_json_field("result", body.result, limit)
    return QueryResult(
        query_id=query_id, worker_id=worker_id, lease_token=body.lease_token, sites=sites,
        outcome=body.outcome, result=body.result,
        error_code=body.error.code if body.error else None,
        error_message=body.error.message if body.error else None, cost=body.cost)
