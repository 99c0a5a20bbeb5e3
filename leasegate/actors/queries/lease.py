"""Leasing queries to workers, each message followed by its handler: a long-poll
that parks until work appears, and the give-back of leases nobody received."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from leasegate.actors.checks import check_flag, check_id, check_ids, check_int, check_leases
from leasegate.actors.queries.ref import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QueryLease, query_lease
from leasegate.actors.queue.leases import lease_wait, new_lease_token, new_work
from leasegate.actors.runtime.batches import MAX_BATCH
from leasegate.actors.runtime.handlers import Parks
from leasegate.actors.runtime.mailbox import Ask, Tell
from leasegate.actors.runtime.parking import PARK, Park
from leasegate.errors import Unavailable
from leasegate.storage import queries_sql as sql

MAX_LEASES: Final = MAX_BATCH


@dataclass(frozen=True)
class ReleaseQueryLeases(Tell[Queries]):
    """Leases handed to a caller that was already gone: back to ``queued``."""

    leases: tuple[tuple[str, str], ...]  # (query_id, lease_token)

    def check(self) -> None:
        check_leases(self.leases)


@QUERIES.on(ReleaseQueryLeases)
def give_back(turn: QueryTurn, m: ReleaseQueryLeases) -> None:
    for query_id, token in m.leases:
        if sql.give_back(turn.conn, query_id, token, turn.now):
            turn.history.record(query_id, "released")
            turn.work_may_be_available(*new_work(turn.current(query_id)["site"]))


def release_message(leases: tuple[QueryLease, ...]) -> ReleaseQueryLeases | None:
    """What gives back leases their caller never received (None: nothing to give)."""
    if not leases:
        return None
    return ReleaseQueryLeases(tuple((lease.query_id, lease.lease_token) for lease in leases))


@dataclass(frozen=True)
class LeaseQueries(Ask[Queries, tuple[QueryLease, ...]]):
    worker_id: str
    sites: tuple[str, ...] | None = None  # None: every site
    max: int = 1
    request_id: str | None = None
    wait: bool = False  # park until work appears

    def check(self) -> None:
        check_id("worker_id", self.worker_id)
        check_ids("sites", self.sites)
        check_int("max", self.max, 1, MAX_LEASES)
        check_id("request_id", self.request_id, optional=True)
        check_flag("wait", self.wait)


def _serve(turn: QueryTurn, m: LeaseQueries) -> tuple[QueryLease, ...] | None:
    if turn.dry.known(turn.number, m.sites):
        return None
    leases = lease(turn, m)
    if not leases:
        turn.dry.add(turn.number, m.sites)
    return leases or None


WAIT_FOR_WORK: Final[Parks[QueryTurn, tuple[QueryLease, ...]]] = Parks(
    wait=lambda m: lease_wait(m.sites), serve=_serve, drained=lambda turn, m: (),
    give_back=release_message)
"""A lease that waits: woken by new work at its sites; at shutdown, nothing."""


@QUERIES.parks(LeaseQueries, WAIT_FOR_WORK)
def lease_or_wait(turn: QueryTurn, m: LeaseQueries) -> tuple[QueryLease, ...] | Park:
    if turn.draining:
        raise Unavailable("the gateway is shutting down")
    leases = lease(turn, m)
    if not leases and m.wait:
        return PARK
    return leases


def lease(turn: QueryTurn, m: LeaseQueries) -> tuple[QueryLease, ...]:
    conn, now = turn.conn, turn.now
    sites = list(m.sites) if m.sites is not None else None
    if m.request_id is not None:
        replay = sql.leased_by_request(conn, m.worker_id, m.request_id, sites, m.max)
        if replay:
            return tuple(query_lease(row) for row in replay)
    leases = []
    expires_at = now + turn.settings.query_lease_ttl
    for row in sql.next_queued(conn, sites, now, m.max):
        token = new_lease_token()
        leased = sql.take_lease(conn, row["query_id"], m.worker_id, token, m.request_id,
                                expires_at, now)
        if leased is not None:
            turn.history.record(row["query_id"], "leased", job=leased, worker_id=m.worker_id,
                                attempt=leased["attempts"],
                                waited=round(now - leased["created_at"], 3))
            leases.append(query_lease(leased))
    return tuple(leases)
