"""Submitting queries, each message followed by its handler."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from leasegate.actors.checks import MAX_AMOUNT, check_id, check_int, check_job_id, check_json
from leasegate.actors.payloads import canonical_json, fingerprint
from leasegate.actors.queries.ref import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QuerySubmitted
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.submissions import Submit, submit_once
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.views import JSONObject
from leasegate.storage import queries_sql as sql


@dataclass(frozen=True)
class SubmitQuery(Submit[Queries, QuerySubmitted]):
    tenant: str
    site: str
    kind: str
    params: JSONObject = field(default_factory=dict)
    query_id: str | None = None
    max_cost: int | None = None

    def check(self) -> None:
        for name, value in (("tenant", self.tenant), ("site", self.site), ("kind", self.kind)):
            check_id(name, value)
        check_job_id("query_id", self.query_id)
        check_json("params", self.params, optional=False, object_only=True)
        check_int("max_cost", self.max_cost, 0, MAX_AMOUNT, optional=True)

    @property
    def job_id(self) -> str | None:
        return self.query_id

    def with_job_id(self, job_id: str) -> SubmitQuery:
        return dataclasses.replace(self, query_id=job_id)


@QUERIES.on(SubmitQuery)
def submit(turn: QueryTurn, m: SubmitQuery) -> QuerySubmitted:
    conn, now = turn.conn, turn.now
    params = canonical_json(m.params)  # once: the fingerprint takes the text
    digest = fingerprint(m.tenant, m.site, m.kind, params, m.max_cost)
    query_id, replayed = submit_once(
        m.query_id, turn.kind.id_prefix, digest, turn.kind.noun,
        lambda i: sql.insert(conn, query_id=i, tenant=m.tenant, site=m.site, kind=m.kind,
                             params=params, max_cost=m.max_cost, fingerprint=digest,
                             status="queued", created_at=now, updated_at=now,
                             expires_at=now + turn.settings.query_ttl),
        lambda i: sql.get_or_tombstone(conn, i))
    if replayed is not None:
        return QuerySubmitted(query_id, replayed, created=False)
    turn.history.record(query_id, "submitted",
                        job={"tenant": m.tenant, "site": m.site, "status": "queued",
                             "kind": m.kind})
    turn.work_may_be_available(*new_work(m.site))
    return QuerySubmitted(query_id, "queued", created=True)


@dataclass(frozen=True)
class SubmitQueries(Batch[Queries, SubmitQuery, QuerySubmitted]):
    """Up to 100 submits, each idempotent on its own, in one group commit."""

    item = SubmitQuery


QUERIES.each(SubmitQueries, submit)
