"""Submitting queries, each message followed by its handler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from leasegate.actors.checks import check_int
from leasegate.actors.payloads import fingerprint
from leasegate.actors.queries.ref import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QuerySubmitted
from leasegate.actors.queue.submissions import (
    NewJob,
    Submit,
    Submitting,
    handle_submits,
)
from leasegate.actors.runtime.batches import Batch
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


def new_query(turn: QueryTurn, m: SubmitQuery) -> NewJob:
    now = turn.now
    params = m.params_text  # made once, by the check; the fingerprint takes it too
    # max_attempts only when given: a submit without it digests as it always did
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


handle_submits(QUERIES, SubmitQuery, SubmitQueries, Submitting(new_query, QuerySubmitted, sql.JOBS))
