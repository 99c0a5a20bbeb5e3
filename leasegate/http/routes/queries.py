"""Routes of the query channel: requests → query actor messages → JSON."""

from __future__ import annotations

import functools
from typing import Any

from quart import Blueprint
from quart_schema import validate_querystring, validate_request

from leasegate.actors.pages import JobPage
from leasegate.actors.queries.lease import (
    LeaseQueries,
    LeaseQueriesAfterResults,
    release_message,
)
from leasegate.actors.queries.reads import ListQueries
from leasegate.actors.queries.results import QueryResult, QueryResults
from leasegate.actors.queries.submit import SubmitQuery
from leasegate.actors.queries.views import QuerySubmitted, QueryView
from leasegate.http.models.jobs import (
    QueryListArgs,
    QueryResultBody,
    QueryResultItem,
    QueryResultsBody,
    SubmitQueriesBody,
    SubmitQueryBody,
    WaitArgs,
    reported_error,
)
from leasegate.http.models.payloads import check_json_field
from leasegate.http.models.replies import QueriesSubmitted, QueryItems, answers
from leasegate.http.models.workers import QueryLeaseBody, QueryLeaseReply
from leasegate.http.routes import batches
from leasegate.http.routes.jobs import job_reply, search_reply
from leasegate.http.routes.lease_calls import lease_after_results
from leasegate.http.server.auth import allow, require
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json

bp = Blueprint("queries", __name__)


@bp.post("/v1/queries")
@batches.submit_route(SubmitQueryBody, QuerySubmitted, single=True)
async def submit_query(data: SubmitQueryBody) -> tuple[Any, int]:
    """Submit a read-only query (client). Idempotent by ``query_id``."""
    # With max_cost: hold on the tenant's account first (402 when short), then enqueue.
    return batches.submitted(await system().jobs.queries.submit(
        _submit_message(batches.submitter(), data)))


def _submit_message(tenant: str, data: SubmitQueryBody, limit: int | None = None) -> SubmitQuery:
    check_json_field("params", data.params, limit)
    return SubmitQuery(tenant=tenant, query_id=data.query_id, site=data.site, kind=data.kind,
                       params=data.params, max_cost=data.max_cost,
                       max_attempts=data.max_attempts)


@bp.post("/v1/queries/batch")
@batches.submit_route(SubmitQueriesBody, QueriesSubmitted, single=False)
async def submit_queries(data: SubmitQueriesBody) -> Any:
    """Submit 1–100 queries (client) in one commit, each answered on its own.

    Each item gets the status ``POST /v1/queries`` would give it alone. An id given
    twice in one batch: the second is a replay of the first."""
    tenant = batches.submitter()
    items = batches.each_body(SubmitQueryBody, data.items,
                              lambda body, limit: _submit_message(tenant, body, limit))
    return batches.reply("query", await system().jobs.queries.submit_many(items),
                         batches.created,
                         batches.receipt)


@bp.post("/v1/queries/results")
@allow("worker")
@validate_request(QueryResultsBody)
@answers(QueryItems)
async def query_results(data: QueryResultsBody) -> Any:
    """Report 1–100 query results (worker), each fenced and answered on its own."""
    sites = require("worker").sites
    return await batches.each_reported(
        "query", system().jobs.queries, QueryResults, QueryResultItem, data.items,
        lambda item, limit: _result_message(item.query_id, data.worker_id, sites, item, limit))


@bp.get("/v1/queries/<query_id>")
@allow("client")
@validate_querystring(WaitArgs)
@answers(QueryView)
async def get_query(query_id: str, query_args: WaitArgs) -> Any:
    """A query; with ``wait_seconds`` (0–30), long-poll until it is terminal."""
    return await job_reply(system().jobs.queries, query_id, query_args.wait_seconds)


@bp.get("/v1/queries")
@allow("client")
@validate_querystring(QueryListArgs)
@answers(JobPage[QueryView])
async def list_queries(query_args: QueryListArgs) -> Any:
    """Queries, newest first (own tenant; admin: all), that match every filter given."""
    return await search_reply(system().jobs.queries, query_args,
                              functools.partial(ListQueries, status=query_args.status))


@bp.post("/v1/queries/lease")
@allow("worker")
@validate_request(QueryLeaseBody)
@answers(QueryLeaseReply)
async def lease_queries(data: QueryLeaseBody) -> Any:
    """Long-poll for up to ``max`` queries (worker).

    ``results``: the outcomes of the worker's previous queries, reported before the
    lease in the same commit, each answered on its own in the reply's ``results``, as
    ``POST /v1/queries/results`` would answer it."""
    principal = require("worker")
    sites = principal.sites
    results = None if data.results is None else batches.each_body(
        QueryResultItem, data.results,
        lambda item, limit: _result_message(item.query_id, data.worker_id, sites, item, limit))
    return await lease_after_results("query", system().jobs.queries, LeaseQueries, data, principal,
                                     results, LeaseQueriesAfterResults, release_message)


@bp.post("/v1/queries/<query_id>/result")
@allow("worker")
@validate_request(QueryResultBody)
@answers(QueryView, 409)
async def query_result(query_id: str, data: QueryResultBody) -> Any:
    """Report a query's outcome with the lease token (worker)."""
    principal = require("worker")
    return to_json(await system().jobs.queries.ask(
        _result_message(query_id, data.worker_id, principal.sites, data)))


def _result_message(query_id: str, worker_id: str, sites: tuple[str, ...] | None,
                    body: QueryResultBody | QueryResultItem,
                    limit: int | None = None) -> QueryResult:
    """A result, single or one item of a batch, as the query actor takes it."""
    check_json_field("result", body.result, limit)
    return QueryResult(
        query_id=query_id, worker_id=worker_id, lease_token=body.lease_token, sites=sites,
        outcome=body.outcome, result=body.result, **reported_error(body.error),
        cost=body.cost, retryable=body.error is None or body.error.retryable,
        snooze_seconds=body.snooze_seconds)
