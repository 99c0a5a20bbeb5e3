"""Workers' results of queries, each message followed by its handler."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import (
    MAX_TOKEN,
    check_choice,
    check_id,
    check_ids,
    check_text,
)
from leasegate.actors.payloads import canonical_json, fingerprint
from leasegate.actors.queries.ref import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QueryView, query_view
from leasegate.actors.queue.errors import check_report, detail_digest
from leasegate.actors.queue.leases import check_site
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.views import JSONValue
from leasegate.errors import QueryLeaseInvalid, QueryNotFound
from leasegate.logs import escape
from leasegate.storage import queries_sql as sql
from leasegate.storage.job_errors_sql import record_detail

log = logging.getLogger("leasegate.queries")

QueryOutcome = Literal["succeeded", "failed"]


@dataclass(frozen=True)
class QueryResult(Ask[Queries, QueryView]):
    query_id: str
    worker_id: str
    lease_token: str
    outcome: QueryOutcome
    result: JSONValue = None
    error_code: int | None = None
    error_message: str | None = None
    cost: int | None = None
    sites: tuple[str, ...] | None = None  # the key's sites (None: every site)
    error_type: str | None = None
    error_traceback: str | None = None

    def check(self) -> None:
        check_id("query_id", self.query_id)
        check_id("worker_id", self.worker_id)
        check_text("lease_token", self.lease_token, most=MAX_TOKEN, empty=False)
        check_choice("outcome", self.outcome, QueryOutcome)
        check_report(self.result, self.error_code, self.error_message, self.error_type,
                     self.error_traceback, self.cost)
        check_ids("sites", self.sites)


@QUERIES.on(QueryResult)
def result(turn: QueryTurn, m: QueryResult) -> QueryView:
    conn, now = turn.conn, turn.now
    row = sql.get(conn, m.query_id)
    if row is None:
        raise QueryNotFound(f"no query {m.query_id}")
    check_site(row["site"], m.sites)
    given = None if m.result is None else canonical_json(m.result)  # once
    digest = fingerprint(m.outcome, given, m.error_code, m.error_message, m.cost,
                         *detail_digest(m.error_type, m.error_traceback))
    ours = row["lease_owner"] == m.worker_id and row["lease_token"] == m.lease_token
    if row["status"] in sql.TERMINAL:
        if ours and row["outcome_digest"] == digest:
            return query_view(row)  # a retry of the accepted result
        raise QueryLeaseInvalid(
            f"query {m.query_id} is already {row['status']}; no further result is accepted")
    if row["status"] != "leased" or not ours:
        raise QueryLeaseInvalid(
            f"worker {m.worker_id} does not hold the current lease of query {m.query_id}")
    stored = given
    if m.outcome == "succeeded":
        stored = given if given is not None else canonical_json({})
        code, message = None, None
    else:
        code, message = m.error_code, m.error_message or "the worker gave no reason"
        log.warning("query failed: query_id=%s kind=%s code=%s message=%s",
                    escape(m.query_id), escape(row["kind"]), code, escape(message))
    updated = sql.finish(conn, m.query_id, m.lease_token, m.outcome, now, stored, code,
                         message, m.cost, digest)
    assert updated is not None  # read above, in this turn: leased under this token
    if m.outcome == "failed" and (m.error_type or m.error_traceback) is not None:
        record_detail(conn, "queries", m.query_id, m.error_type, m.error_traceback)
        updated = sql.get(conn, m.query_id) or updated
    turn.history.record(m.query_id, "result", job=updated, outcome=m.outcome, late=False,
                        worker_id=m.worker_id, cost=m.cost)
    turn.settle.ended(updated)
    return query_view(updated)


@dataclass(frozen=True)
class QueryResults(Batch[Queries, QueryResult, QueryView]):
    """Up to 100 results, each fenced on its own."""

    item = QueryResult


QUERIES.each(QueryResults, result)
