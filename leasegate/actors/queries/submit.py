"""Submitting queries, each message followed by its handler."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from leasegate.actors.checks import check_int
from leasegate.actors.payloads import fingerprint
from leasegate.actors.queries import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QuerySubmitted
from leasegate.actors.queue.submissions import NewJob, Submit, submit_all, submit_one
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.turn import checked
from leasegate.settings import MAX_QUERY_ATTEMPTS
from leasegate.storage import queries_sql as sql


@dataclass(frozen=True)
class SubmitQuery(Submit[Queries, QuerySubmitted]):
    query_id: str | None = None
    max_cost: int | None = None
    max_attempts: int | None = None  # None: the query_max_attempts setting
    id_field: ClassVar[str] = "query_id"

    def check(self) -> None:
        super().check()
        check_int("max_attempts", self.max_attempts, 1, MAX_QUERY_ATTEMPTS, optional=True)


@QUERIES.on(SubmitQuery)
def submit(turn: QueryTurn, m: SubmitQuery) -> QuerySubmitted:
    """One submit: created, or an identical replay of its id (else 6004)."""
    return submit_one(turn, m, _new_query(turn, m), QuerySubmitted, sql.JOBS)


def submit_queries(turn: QueryTurn, items: Sequence[SubmitQuery]) -> list[QuerySubmitted]:
    """A batch of submits set-based (see ``submit_all``)."""
    return submit_all(turn, items, [_new_query(turn, m) for m in checked(items)],
                      QuerySubmitted, sql.JOBS)


QUERIES.locks(SubmitQuery, lambda m: sql.JOBS.submit_scope(m.job_id))


def _new_query(turn: QueryTurn, m: SubmitQuery) -> NewJob:
    now = turn.now
    params = m.params_text  # made once, by the check; the fingerprint takes it too
    # max_attempts only when given: a replay of a submit stored without it still
    # matches its digest
    digest = fingerprint(m.tenant, m.site, m.kind, params, m.max_cost,
                         *(() if m.max_attempts is None else (m.max_attempts,)))
    return NewJob({
        "tenant": m.tenant, "site": m.site, "kind": m.kind, "params": params,
        "max_cost": m.max_cost, "fingerprint": digest, "status": "queued",
        "created_at": now, "updated_at": now, "expires_at": now + turn.settings.query_ttl,
        "max_attempts": m.max_attempts or turn.settings.query_max_attempts,
        "available_at": now},
        digest, leasable=True)


@dataclass(frozen=True)
class SubmitQueries(Batch[Queries, SubmitQuery, QuerySubmitted]):
    """Up to 100 submits, each idempotent on its own, in one group commit (set-based:
    one insert of the new queries, one of their history)."""

    item = SubmitQuery


QUERIES.each(SubmitQueries, submit, submit_queries)
QUERIES.locks_each(SubmitQueries, lambda m: sql.JOBS.submit_scope(m.job_id))
