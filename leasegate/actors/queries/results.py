"""Workers' results of queries, each message followed by its handler, and when a
failed query is tried again: exponential backoff with jitter.

Attempt ``n`` (counted from 1) that fails waits ``min(base × 2^(n−1), max)`` seconds
(``query_retry_base_seconds``, ``query_retry_max_seconds``), spread by ±20% so that the
queries of a site that failed together do not all come back in the same instant.
``JITTER`` is the random source (a test replaces it with a fixed one)::

    backoff(settings, attempt=3)   # 8 s ± 20% by default
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
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
from leasegate.actors.queries import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QueryView
from leasegate.actors.queue import reports
from leasegate.actors.queue.leases import check_site
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.runtime.turn import answer_of_one, checked_once_each
from leasegate.actors.views import JSONValue
from leasegate.clock import iso
from leasegate.errors import InvalidRequest, LeasegateError, QueryLeaseInvalid
from leasegate.logs import escape
from leasegate.settings import Settings
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
        keep_text(self, "result_text", reports.check_report(
            self.result, self.error_code, self.error_message, self.error_type,
            self.error_traceback, self.cost))
        check_ids("sites", self.sites)
        check_flag("retryable", self.retryable)
        snoozed = self.outcome == "snoozed"
        check_int("snooze_seconds", self.snooze_seconds, 1, MAX_SNOOZE, optional=not snoozed)
        if not snoozed and self.snooze_seconds is not None:
            raise InvalidRequest("snooze_seconds is only for the outcome snoozed")


@QUERIES.on(QueryResult)
def result(turn: QueryTurn, m: QueryResult) -> QueryView:
    """One result: a batch of one (:func:`_results`), so that one and many never part."""
    return answer_of_one(_results(turn, [m]))


def result_all(turn: QueryTurn, items: Sequence[QueryResult],
               ) -> list[QueryView | LeasegateError]:
    """A batch of results, each answered as :func:`result` would answer it alone. Raises
    :class:`RetryItemByItem` (each item then goes in a savepoint of its own) before it writes
    anything when an item fails its checks or a query's result comes twice, and after,
    when a lease changed between the read and the write (PostgreSQL, another gateway)."""
    checked_once_each(items, lambda m: m.query_id, "a query's result twice")
    return _results(turn, items)


def _results(turn: QueryTurn, items: Sequence[QueryResult],
             ) -> list[QueryView | LeasegateError]:
    """Each result judged against its query's row (all read at once), the accepted ones
    written in one UPDATE and their history in one insert (see ``queue.reports``); a
    refusal is its item's answer (it wrote nothing)."""
    verdicts: reports.Verdicts[QueryResult, sql.QueryFinish, QueryView] = reports.judge_results(
        turn, items, [m.query_id for m in items], _judge)
    if verdicts.accepted:
        finished = sql.finish_many(turn.conn, verdicts.finishes(), turn.now)
        if reports.record_results(turn, verdicts, finished) is None:
            raise _not_held(verdicts.accepted[0].message)
    return verdicts.in_order()


def _judge(turn: QueryTurn, m: QueryResult, row: Row) -> Row | reports.Finish[sql.QueryFinish]:
    """The query's row if ``m`` is a retry of its accepted result, else what the result
    writes; a result the query does not take is refused (6006)."""
    check_site(row["site"], m.sites)
    given = m.result_text
    # a failure's retryable and a snooze only when given: a retry of a result stored
    # without them still matches its digest
    digest = fingerprint(m.outcome, given, m.error_code, m.error_message, m.cost,
                         *reports.detail_digest(m.error_type, m.error_traceback),
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
        return reports.Finish(_finish(m, "queued", digest, next_attempt_at=wake,
                                      errors=row["errors"], refund=1), detail)
    if m.outcome == "succeeded":
        stored = given if given is not None else canonical_json({})
        return reports.Finish(_finish(m, "succeeded", digest, result=stored, cost=m.cost,
                                      errors=row["errors"]), detail)
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
        return reports.Finish(
            _finish(m, "queued", digest, next_attempt_at=wake, errors=errors), detail)
    log.warning("query failed: query_id=%s kind=%s attempt=%s code=%s message=%s",
                escape(m.query_id), escape(row["kind"]), attempt, code, escape(message))
    return reports.Finish(_finish(m, "failed", digest, result=given, error_code=code,
                                  error_message=message, cost=m.cost,
                                  error_type=m.error_type,
                                  error_traceback=m.error_traceback, errors=errors), detail)


def _finish(m: QueryResult, status: str, digest: str, *, result: str | None = None,
            error_code: int | None = None, error_message: str | None = None,
            cost: int | None = None, error_type: str | None = None,
            error_traceback: str | None = None, next_attempt_at: float | None = None,
            errors: str | None, refund: int = 0) -> sql.QueryFinish:
    """What ``m`` writes to its query's row: its outcome's fields (None: cleared)."""
    return sql.QueryFinish(
        job_id=m.query_id, lease_token=m.lease_token, status=status, result=result,
        error_code=error_code, error_message=error_message, cost=cost,
        outcome_digest=digest, error_type=error_type, error_traceback=error_traceback,
        next_attempt_at=next_attempt_at, errors=errors, refund=refund)


def _not_held(m: QueryResult) -> LeasegateError:
    return QueryLeaseInvalid(
        f"worker {m.worker_id} does not hold the current lease of query {m.query_id}")


@dataclass(frozen=True)
class QueryResults(Batch[Queries, QueryResult, QueryView]):
    """Up to 100 results, each fenced on its own (applied set-based: :func:`result_all`)."""

    item = QueryResult


QUERIES.each(QueryResults, result, result_all)


SPREAD: Final = 0.2
"""The jitter: a wait is its nominal length times a uniform factor in [0.8, 1.2]."""

JITTER = random.Random()
"""The random source of the jitter (``uniform``)."""


def backoff(settings: Settings, attempt: int) -> float:
    """Seconds a query whose attempt ``attempt`` failed waits before its next one."""
    nominal = min(settings.query_retry_base_seconds * 2.0 ** min(attempt - 1, 64),
                  settings.query_retry_max_seconds)
    return nominal * JITTER.uniform(1 - SPREAD, 1 + SPREAD)
