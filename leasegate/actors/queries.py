"""The query actor: read-only work, delivered at least once.

Attempts are counted when a
query is leased; an expired lease puts the query back to ``queued``, or to
``failed`` once ``query_max_attempts`` leases have lapsed; a query past its
TTL is ``expired`` first (rerunning it would be pointless); finished rows are
purged after ``query_retention``, each leaving a tombstone (tenant, id,
fingerprint, final status) for ``id_tombstone_retention`` so that a resubmit
of its id is a replay or 6004, never a new query. Queries never touch worker presence: a live
query loop must not hide a dead task loop.

Deadlines are timers: the actor wakes exactly when the next lease or TTL runs
out, not on a coarse tick and not on the next lease call.
"""

from __future__ import annotations

import logging
import sqlite3

from leasegate.actors.batches import EachItem
from leasegate.actors.billing import SettleNotices
from leasegate.actors.event_hub import EventHub
from leasegate.actors.history import GetHistory, JobHistory, RecordSettled
from leasegate.actors.leases import (
    DryFilters,
    check_site,
    job_wait,
    lease_wait,
    new_lease_token,
    new_work,
)
from leasegate.actors.mailbox import Ask, Mailbox, Tell
from leasegate.actors.pages import Paged
from leasegate.actors.parking import Wait
from leasegate.actors.payloads import canonical_json, fingerprint
from leasegate.actors.query_messages import (
    TERMINAL,
    CountQueries,
    GetQuery,
    LeaseQueries,
    ListQueries,
    ListQuerySites,
    QueryResult,
    QueryResults,
    ReleaseQueryLeases,
    SubmitQueries,
    SubmitQuery,
    release_message,
)
from leasegate.actors.query_views import (
    QueryCounts,
    QueryLease,
    QuerySite,
    QuerySubmitted,
    QueryView,
    query_lease,
    query_view,
)
from leasegate.actors.runtime import PARK, Actor
from leasegate.actors.submissions import submit_once
from leasegate.clock import Clock
from leasegate.errors import QueryLeaseInvalid, QueryNotFound, Unavailable
from leasegate.logs import escape
from leasegate.settings import Settings
from leasegate.storage import queries_sql as sql
from leasegate.storage.connection import Database
from leasegate.storage.pages import page_rows

log = logging.getLogger("leasegate.queries")

PURGE_BATCH = 2000  # rows a purge run deletes; a full batch runs again a second later

# ---- the actor ------------------------------------------------------------------

class QueryQueue(Actor, EachItem):
    name = "queries"

    def __init__(self, db: Database, clock: Clock, settings: Settings, *,
                 ledger: Mailbox | None = None, events: EventHub | None = None) -> None:
        super().__init__(db, clock, error_log_window=settings.error_log_window)
        self.settings = settings
        self.history = JobHistory(self, "query", events)  # one record() per transition
        # A query with max_cost that ends is settled by the ledger after the commit.
        self.settle = SettleNotices(self, "query", ledger)
        self._dry = DryFilters()
        self.add_job("purge_queries", settings.housekeeping_interval, self._purge)

    def handle(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        now = self.now
        match message:
            case SubmitQuery():
                return self._submit(conn, message, now)
            case SubmitQueries():
                return self.each(conn, message.items, lambda c, m: self._submit(c, m, now))
            case GetQuery():
                row = self._visible(conn, message.query_id, message.tenant)
                if message.wait and row["status"] not in TERMINAL:
                    return PARK
                return query_view(row)
            case ListQueries():
                return self._list(conn, message)
            case LeaseQueries():
                if self.draining:
                    raise Unavailable("the gateway is shutting down")
                leases = self._lease(conn, message, now)
                if not leases and message.wait:
                    return PARK
                return leases
            case QueryResult():
                return self._result(conn, message, now)
            case QueryResults():
                return self.each(conn, message.items, lambda c, m: self._result(c, m, now))
            case ReleaseQueryLeases():
                for query_id, token in message.leases:
                    if sql.give_back(conn, query_id, token, now):
                        self.history.record(conn, query_id, "released")
                        self._queued_again(conn, query_id)
                return None
            case CountQueries():
                return tuple(self._count(conn, status, message.top) for status in sql.LIVE)
            case ListQuerySites():
                total, rows = sql.sites_page(conn, message.page.limit, message.page.offset)
                return Paged(tuple(QuerySite(r["site"], r["queued"], r["leased"]) for r in rows),
                             total, message.page.limit, message.page.offset)
            case GetHistory() | RecordSettled():
                return self.history.handle(conn, message, self._visible)
        raise TypeError(f"queries: unknown message {message!r}")

    # ---- submit / read ----

    def _submit(self, conn: sqlite3.Connection, m: SubmitQuery, now: float) -> QuerySubmitted:
        params = canonical_json(m.params)  # once: the fingerprint takes the text
        digest = fingerprint(m.tenant, m.site, m.kind, params, m.max_cost)
        query_id, replayed = submit_once(
            m.query_id, "q", digest, "query",
            lambda i: sql.insert(conn, query_id=i, tenant=m.tenant, site=m.site, kind=m.kind,
                                 params=params, max_cost=m.max_cost, fingerprint=digest,
                                 status="queued", created_at=now, updated_at=now,
                                 expires_at=now + self.settings.query_ttl),
            lambda i: sql.get_or_tombstone(conn, i))
        if replayed is not None:
            return QuerySubmitted(query_id, replayed, created=False)
        self.history.record(conn, query_id, "submitted",
                            job={"tenant": m.tenant, "site": m.site, "status": "queued",
                                 "kind": m.kind})
        self.work_may_be_available(*new_work(m.site))
        return QuerySubmitted(query_id, "queued", created=True)

    def _visible(self, conn: sqlite3.Connection, query_id: str, tenant: str | None) -> sqlite3.Row:
        row = sql.get(conn, query_id)
        if row is None or (tenant is not None and row["tenant"] != tenant):
            raise QueryNotFound(f"no query {query_id}")
        return row

    @staticmethod
    def _count(conn: sqlite3.Connection, status: str, top: int) -> QueryCounts:
        n, sites = sql.count_live(conn, status)
        by_site = {r["site"]: r["n"] for r in sql.live_sites(conn, status, top)} if top else {}
        return QueryCounts(status, n, sites, by_site)

    def _list(self, conn: sqlite3.Connection, m: ListQueries) -> Paged[QueryView]:
        total, rows = page_rows(conn, "queries", {"tenant": m.tenant, "status": m.status,
                                                   "site": m.site, "kind": m.kind},
                                m.page.limit, m.page.offset)
        return Paged(tuple(query_view(r) for r in rows), total, m.page.limit, m.page.offset)

    # ---- lease ----

    def _lease(self, conn: sqlite3.Connection, m: LeaseQueries,
               now: float) -> tuple[QueryLease, ...]:
        sites = list(m.sites) if m.sites is not None else None
        if m.request_id is not None:
            replay = sql.leased_by_request(conn, m.worker_id, m.request_id, sites, m.max)
            if replay:
                return tuple(query_lease(row) for row in replay)
        leases = []
        expires_at = now + self.settings.query_lease_ttl
        for row in sql.next_queued(conn, sites, now, m.max):
            token = new_lease_token()
            leased = sql.take_lease(conn, row["query_id"], m.worker_id, token, m.request_id,
                                    expires_at, now)
            if leased is not None:
                self.history.record(conn, row["query_id"], "leased", job=leased,
                                    worker_id=m.worker_id,
                                    attempt=leased["attempts"],
                                    waited=round(now - leased["created_at"], 3))
                leases.append(query_lease(leased))
        return tuple(leases)

    def _queued_again(self, conn: sqlite3.Connection, query_id: str) -> None:
        row = sql.get(conn, query_id)
        assert row is not None, query_id
        self.work_may_be_available(*new_work(row["site"]))

    def parked_on(self, message: Ask[object] | Tell) -> Wait | None:
        if isinstance(message, LeaseQueries):
            return lease_wait(message.sites)
        if isinstance(message, GetQuery):
            return job_wait(message.query_id)
        return None

    def serve_parked(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object | None:
        if isinstance(message, LeaseQueries):
            if self._dry.known(self.turn, message.sites):
                return None
            leases = self._lease(conn, message, self.now)
            if not leases:
                self._dry.add(self.turn, message.sites)
            return leases or None
        if isinstance(message, GetQuery):
            row = sql.get(conn, message.query_id)
            if row is None:  # purged while waiting
                return None
            return query_view(row) if row["status"] in TERMINAL else None
        return None

    def drained_reply(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        if isinstance(message, GetQuery):  # the query as it is now
            return query_view(self._visible(conn, message.query_id, message.tenant))
        return ()

    def undelivered(self, message: Ask[object] | Tell, reply: object) -> Tell | None:
        if isinstance(message, LeaseQueries) and isinstance(reply, tuple):
            return release_message(reply)
        return None

    # ---- result ----

    def _result(self, conn: sqlite3.Connection, m: QueryResult, now: float) -> QueryView:
        row = sql.get(conn, m.query_id)
        if row is None:
            raise QueryNotFound(f"no query {m.query_id}")
        check_site(row["site"], m.sites)
        given = None if m.result is None else canonical_json(m.result)  # once
        digest = fingerprint(m.outcome, given, m.error_code, m.error_message, m.cost)
        ours = row["lease_owner"] == m.worker_id and row["lease_token"] == m.lease_token
        if row["status"] in TERMINAL:
            if ours and row["outcome_digest"] == digest:
                return query_view(row)  # a retry of the accepted result
            raise QueryLeaseInvalid(
                f"query {m.query_id} is already {row['status']}; no further result is accepted"
            )
        if row["status"] != "leased" or not ours:
            raise QueryLeaseInvalid(
                f"worker {m.worker_id} does not hold the current lease of query {m.query_id}"
            )
        result = given
        if m.outcome == "succeeded":
            result = given if given is not None else canonical_json({})
            code, message = None, None
        else:
            code, message = m.error_code, m.error_message or "the worker gave no reason"
            log.warning("query failed: query_id=%s kind=%s code=%s message=%s",
                        escape(m.query_id), escape(row["kind"]), code, escape(message))
        updated = sql.finish(conn, m.query_id, m.lease_token, m.outcome, now, result, code,
                             message, m.cost, digest)
        assert updated is not None  # read above, in this turn: leased under this token
        self.history.record(conn, m.query_id, "result", job=updated, outcome=m.outcome,
                            late=False, worker_id=m.worker_id, cost=m.cost)
        self.settle.ended(updated, TERMINAL)
        return query_view(updated)

    # ---- deadlines and periodic jobs ----

    def next_wakeup(self, conn: sqlite3.Connection) -> float | None:
        return sql.next_deadline(conn)

    def on_wakeup(self, conn: sqlite3.Connection, now: float) -> None:
        # TTL first: a query past its TTL is pointless to rerun.
        for row in sql.expire_past_ttl(conn, now):
            log.warning("query expired: query_id=%s kind=%s", escape(row["query_id"]),
                        escape(row["kind"]))
            self.history.record(conn, row["query_id"], "expired")
            self.settle.ended(sql.get(conn, row["query_id"]), TERMINAL)
        for row in sql.lapsed_leases(conn, now):
            if row["attempts"] >= self.settings.query_max_attempts:
                sql.fail_exhausted(conn, row["query_id"], row["attempts"], now)
                self.history.record(conn, row["query_id"], "lease_expired",
                                    attempts=row["attempts"])
                self.settle.ended(sql.get(conn, row["query_id"]), TERMINAL)
                log.warning("query attempts exhausted, failed: query_id=%s attempts=%s",
                            escape(row["query_id"]), row["attempts"])
            else:
                # Read-only work is safe to run again: this is the difference from tasks.
                sql.requeue(conn, row["query_id"], now)
                self.history.record(conn, row["query_id"], "lease_expired",
                                    attempts=row["attempts"])
                log.info("query lease expired, redelivering: query_id=%s attempts=%s",
                         escape(row["query_id"]), row["attempts"])
                self._queued_again(conn, row["query_id"])

    def _purge(self, conn: sqlite3.Connection, now: float) -> bool:
        """Delete finished queries past retention (each leaves a tombstone that keeps
        its id taken) and tombstones past theirs, a batch at a time; True if more remain."""
        purged = sql.purge_completed_before(conn, now - self.settings.query_retention, now,
                                            PURGE_BATCH)
        forgotten = sql.purge_tombstones_before(
            conn, now - self.settings.id_tombstone_retention, PURGE_BATCH)
        if purged:
            log.info("purged %d finished queries past retention", purged)
        if forgotten:
            log.info("forgot %d query id tombstones past id_tombstone_retention", forgotten)
        return PURGE_BATCH in (purged, forgotten)


