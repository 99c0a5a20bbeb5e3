"""Workers' results of queries, each message followed by its handler."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final, Literal

from leasegate.actors.attempts import AttemptError, with_error
from leasegate.actors.checks import (
    MAX_TOKEN,
    check_choice,
    check_flag,
    check_id,
    check_ids,
    check_int,
    check_text,
    keep_text,
    stored_text,
)
from leasegate.actors.payloads import canonical_json, fingerprint
from leasegate.actors.queries.ref import Queries
from leasegate.actors.queries.retries import backoff
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QueryView
from leasegate.actors.queue.errors import check_report, detail_digest
from leasegate.actors.queue.leases import check_site
from leasegate.actors.queue.reports import Finish, Reporting
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.views import JSONValue
from leasegate.clock import iso
from leasegate.errors import InvalidRequest, LeasegateError, QueryLeaseInvalid
from leasegate.logs import escape
from leasegate.storage import queries_sql as sql
from leasegate.storage.engine import Row

log = logging.getLogger("leasegate.queries")

QueryOutcome = Literal["succeeded", "failed", "snoozed"]
MAX_SNOOZE: Final = 86400
"""The longest a worker may snooze a query (seconds)."""


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
    retryable: bool = True  # False: a failure the query fails with at once
    snooze_seconds: int | None = None  # outcome "snoozed": queued again after this long

    result_text = stored_text("result")  # made once, by check()

    def check(self) -> None:
        check_id("query_id", self.query_id)
        check_id("worker_id", self.worker_id)
        check_text("lease_token", self.lease_token, most=MAX_TOKEN, empty=False)
        check_choice("outcome", self.outcome, QueryOutcome)
        keep_text(self, "result_text", check_report(
            self.result, self.error_code, self.error_message, self.error_type,
            self.error_traceback, self.cost))
        check_ids("sites", self.sites)
        check_flag("retryable", self.retryable)
        snoozed = self.outcome == "snoozed"
        check_int("snooze_seconds", self.snooze_seconds, 1, MAX_SNOOZE, optional=not snoozed)
        if not snoozed and self.snooze_seconds is not None:
            raise InvalidRequest("snooze_seconds is only for the outcome snoozed")


def _judge(turn: QueryTurn, m: QueryResult, row: Row) -> Row | Finish:
    """The query's row if ``m`` is a retry of its accepted result, else what the result
    writes; a result the query does not take is refused (6006)."""
    check_site(row["site"], m.sites)
    given = m.result_text
    # a failure's retryable and a snooze only when given: other results digest as before
    digest = fingerprint(m.outcome, given, m.error_code, m.error_message, m.cost,
                         *detail_digest(m.error_type, m.error_traceback),
                         *(() if m.retryable else ("permanent",)),
                         *(() if m.snooze_seconds is None else (m.snooze_seconds,)))
    ours = row["lease_owner"] == m.worker_id and row["lease_token"] == m.lease_token
    if row["status"] in sql.TERMINAL or row["status"] == "queued":
        if ours and row["outcome_digest"] == digest:
            return row  # a retry of the accepted result (one that queued it again too)
        if row["status"] in sql.TERMINAL:
            raise QueryLeaseInvalid(
                f"query {m.query_id} is already {row['status']}; no further result is "
                "accepted")
    if row["status"] != "leased" or not ours:
        raise _not_held(m)
    detail: dict[str, Any] = {"outcome": m.outcome, "late": False, "worker_id": m.worker_id,
                              "cost": m.cost}
    if m.outcome == "snoozed":  # not an attempt: the lease's is given back
        wake = turn.now + (m.snooze_seconds or 0)
        detail["next_attempt_at"] = iso(wake)
        return Finish((m.lease_token, "queued", None, None, None, None, digest, None, None,
                       wake, row["errors"], 1), detail)
    if m.outcome == "succeeded":
        stored = given if given is not None else canonical_json({})
        return Finish((m.lease_token, "succeeded", stored, None, None, m.cost, digest,
                       None, None, None, row["errors"], 0), detail)
    code, message = m.error_code, m.error_message or "the worker gave no reason"
    attempt = row["attempts"]
    errors = with_error(row["errors"], AttemptError(
        attempt, turn.now, m.worker_id, code, m.error_type, message, m.error_traceback))
    if m.retryable and attempt < (row["max_attempts"] or turn.settings.query_max_attempts):
        wake = turn.now + backoff(turn.settings, attempt)
        detail["next_attempt_at"] = iso(wake)
        log.info("query failed, retried later: query_id=%s kind=%s attempt=%s code=%s "
                 "message=%s", escape(m.query_id), escape(row["kind"]), attempt, code,
                 escape(message))
        return Finish((m.lease_token, "queued", None, None, None, None, digest, None, None,
                       wake, errors, 0), detail)
    log.warning("query failed: query_id=%s kind=%s attempt=%s code=%s message=%s",
                escape(m.query_id), escape(row["kind"]), attempt, code, escape(message))
    return Finish((m.lease_token, "failed", given, code, message, m.cost, digest,
                   m.error_type, m.error_traceback, None, errors, 0), detail)


def _not_held(m: QueryResult, row: Row | None = None) -> LeasegateError:
    return QueryLeaseInvalid(
        f"worker {m.worker_id} does not hold the current lease of query {m.query_id}")


REPORTING: Final[Reporting[QueryTurn, QueryResult, QueryView]] = Reporting(
    job_id=lambda m: m.query_id, judge=_judge, refused=_not_held, sql=sql)
"""Query results, one or a batch (see ``queue.reports``)."""


@dataclass(frozen=True)
class QueryResults(Batch[Queries, QueryResult, QueryView]):
    """Up to 100 results, each fenced on its own (applied set-based: ``REPORTING.all``)."""

    item = QueryResult


REPORTING.handle(QUERIES, QueryResult, QueryResults)
