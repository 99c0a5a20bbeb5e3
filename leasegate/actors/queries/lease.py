"""Leasing queries to workers, each message followed by its handler: a long-poll
that waits until work appears, and the give-back of leases nobody received."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from leasegate.actors.queries import Queries
from leasegate.actors.queries.results import QueryResult, result, result_all
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QueryLease, QueryView, query_lease
from leasegate.actors.queue.leases import new_work
from leasegate.actors.queue.leasing import (
    LeaseAfterResults,
    LeaseCall,
    ReleaseLeases,
    admitted_sites,
    claims,
    give_back_with,
    handle_results_then_lease,
    lease_sites,
    leases_or_not_yet,
    record_leased,
    waiting_for_work,
)
from leasegate.actors.runtime.waiters import NotYet
from leasegate.storage import queries_sql as sql
from leasegate.storage.engine import Row


@dataclass(frozen=True)
class ReleaseQueryLeases(ReleaseLeases[Queries]):
    """Leases handed to a caller that was already gone: back to ``queued``."""


@QUERIES.on(ReleaseQueryLeases)
def give_back(turn: QueryTurn, m: ReleaseQueryLeases) -> None:
    for query_id, token in m.leases:
        if sql.give_back(turn.conn, query_id, token, turn.now):
            turn.history.record(query_id, "released")
            turn.work_may_be_available(*new_work(turn.current(query_id)["site"]))


release_message = give_back_with(ReleaseQueryLeases)
"""What gives back leases their caller never received (None: nothing to give)."""


@dataclass(frozen=True)
class LeaseQueries(LeaseCall[Queries, QueryLease]):
    """Up to ``max`` queries, each leased until ``query_lease_ttl`` from now."""


def lease(turn: QueryTurn, m: LeaseQueries) -> tuple[QueryLease, ...]:
    """Up to ``m.max`` queries, each leased until ``query_lease_ttl`` from now (an
    attempt is counted at each lease)."""
    turn.presence.saw(turn, m.worker_id, m.sites, m.key_id)
    replay = (sql.leased_by_request(turn.conn, m.worker_id, m.request_id, lease_sites(m), m.max)
              if m.request_id is not None else [])  # a retry after a lost response
    if replay:
        return tuple(map(query_lease, replay))
    return take_new(turn, m, turn.now + turn.settings.query_lease_ttl)


def attempt(row: Row) -> int:
    """The attempt a lease is: counted at each lease, this one included."""
    return int(row["attempts"])


def waiting_since(row: Row) -> float:
    """Since when a leased query waited: back in line (``available_at``), else its submit."""
    return float(row["available_at"] or row["created_at"])


def take_new(turn: QueryTurn, m: LeaseQueries, expires_at: float) -> tuple[QueryLease, ...]:
    # New leases until expires_at: picked at the sites the lease may take from, taken in
    # one UPDATE, their history in one insert.
    with admitted_sites(turn, m) as (sites, admit):
        queued = sql.next_queued(turn.conn, sites, turn.now, m.max, admit=admit)
    leased = sql.take_leases(turn.conn, *claims(turn, m, queued, expires_at)) if queued else []
    return tuple(map(query_lease, record_leased(turn, m, leased, attempt, waiting_since)))


WAIT_FOR_WORK: Final = waiting_for_work(lease, release_message)
"""A lease that waits: woken by new work at its sites; at shutdown, nothing."""


@QUERIES.may_wait(LeaseQueries, WAIT_FOR_WORK)
def lease_or_wait(turn: QueryTurn, m: LeaseQueries) -> tuple[QueryLease, ...] | NotYet:
    return leases_or_not_yet(turn, m, lease)


@dataclass(frozen=True)
class LeaseQueriesAfterResults(LeaseAfterResults[Queries, QueryResult, QueryView, QueryLease]):
    """``POST /v1/queries/lease`` with ``results``: the results, then the lease, in one
    turn (see ``LeaseAfterResults``)."""

    item = QueryResult
    lease_kind = LeaseQueries


handle_results_then_lease(QUERIES, LeaseQueriesAfterResults, result, result_all,
                          lease_or_wait)
