"""Routes of the query channel (API.md "Queries")."""

from __future__ import annotations

from typing import Any

from quart import Blueprint
from quart_schema import document_response, validate_querystring, validate_request

from leasegate.actors.queries import (
    GetQuery,
    LeaseQueries,
    ListQueries,
    QueryResult,
    SubmitQuery,
    release_message,
)
from leasegate.http.auth import require, require_submitter, require_tenant, worker_sites
from leasegate.http.common import check_json_field, long_poll, page, system
from leasegate.http.models import (
    ErrorEnvelope,
    LeaseBody,
    QueryLeases,
    QueryListArgs,
    QueryObject,
    QueryPage,
    QueryResultBody,
    QuerySubmitted,
    SubmitQueryBody,
    WaitArgs,
)

bp = Blueprint("queries", __name__)


@bp.post("/v1/queries")
@validate_request(SubmitQueryBody)
@document_response(QuerySubmitted, 201)
@document_response(ErrorEnvelope, 409)
async def submit_query(data: SubmitQueryBody) -> tuple[dict[str, Any], int]:
    """Submit a read-only query (client). Idempotent by ``query_id``."""
    tenant = require_submitter()
    check_json_field("params", data.params)
    reply = await system().queries.mailbox.ask(SubmitQuery(
        tenant=tenant, query_id=data.query_id, site=data.site, kind=data.kind,
        params=data.params, max_cost=data.max_cost))
    return reply, 201 if reply["created"] else 200


@bp.get("/v1/queries/<query_id>")
@validate_querystring(WaitArgs)
@document_response(QueryObject)
async def get_query(query_id: str, query_args: WaitArgs) -> dict[str, Any]:
    """A query; with ``wait_seconds`` (0–30), long-poll until it is terminal."""
    _, tenant = require_tenant("client")
    queries = system().queries.mailbox
    if query_args.wait_seconds:
        found = await long_poll(queries, GetQuery(query_id, tenant, wait=True),
                                query_args.wait_seconds, lambda _: None, None)
        if found is not None:
            return dict(found)
    reply: dict[str, Any] = await queries.ask(GetQuery(query_id, tenant))
    return reply


@bp.get("/v1/queries")
@validate_querystring(QueryListArgs)
@document_response(QueryPage)
async def list_queries(query_args: QueryListArgs) -> dict[str, Any]:
    """Queries, newest first (own tenant; admin: all)."""
    _, tenant = require_tenant("client")
    reply: dict[str, Any] = await system().queries.mailbox.ask(ListQueries(
        tenant=tenant, status=query_args.status, site=query_args.site, kind=query_args.kind,
        page=page(query_args)))
    return reply


@bp.post("/v1/queries/lease")
@validate_request(LeaseBody)
@document_response(QueryLeases)
async def lease_queries(data: LeaseBody) -> dict[str, Any]:
    """Long-poll for up to ``max`` queries (worker)."""
    principal = require("worker")
    message = LeaseQueries(worker_id=data.worker_id, sites=worker_sites(principal, data.sites),
                           max=data.max, request_id=data.request_id,
                           wait=data.wait_seconds > 0)
    items = await long_poll(system().queries.mailbox, message, data.wait_seconds,
                            release_message, [])
    return {"items": items}


@bp.post("/v1/queries/<query_id>/result")
@validate_request(QueryResultBody)
@document_response(QueryObject)
@document_response(ErrorEnvelope, 409)
async def query_result(query_id: str, data: QueryResultBody) -> dict[str, Any]:
    """Report a query's outcome with the lease token (worker)."""
    principal = require("worker")
    check_json_field("result", data.result)
    reply: dict[str, Any] = await system().queries.mailbox.ask(QueryResult(
        query_id=query_id, worker_id=data.worker_id, lease_token=data.lease_token,
        sites=principal.sites,
        outcome=data.outcome, result=data.result,
        error_code=data.error.code if data.error else None,
        error_message=data.error.message if data.error else None, cost=data.cost))
    return reply
