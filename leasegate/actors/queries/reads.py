"""Reading queries, each message followed by its handler (one query and a query's
history are read as every queue reads them: ``leasegate.actors.queue.reads``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import check_choice, check_int
from leasegate.actors.pages import MAX_LIMIT, JobPage, ListPage, Paged, paged
from leasegate.actors.queries import Queries
from leasegate.actors.queries.turn import QUERIES, QueryTurn
from leasegate.actors.queries.views import QueryCounts, QuerySite, QueryView, query_view
from leasegate.actors.queue.reads import GetJob, serve_reads
from leasegate.actors.queue.search import SearchJobs, run_search
from leasegate.actors.runtime.mailbox import Ask
from leasegate.storage import queries_sql as sql
from leasegate.storage.engine import Connection

QueryStatus = Literal["queued", "leased", "succeeded", "failed", "expired"]


@dataclass(frozen=True)
class GetQuery(GetJob[Queries, QueryView]):
    """A query; with ``wait``, it waits until it is terminal."""


serve_reads(QUERIES, GetQuery)  # and a query's history, and the ledger's settlements


@dataclass(frozen=True)
class ListQueries(SearchJobs[Queries, QueryView]):
    """Queries, newest first, that match every filter given (``queue.search``)."""

    status: QueryStatus | None = None

    def check(self) -> None:
        check_choice("status", self.status, QueryStatus, optional=True)
        super().check()


@QUERIES.on(ListQueries)
def list_queries(turn: QueryTurn, m: ListQueries) -> JobPage[QueryView]:
    return run_search(turn.conn, "queries", "query_id", m, {"status": m.status}, query_view)


@dataclass(frozen=True)
class CountQueries(Ask[Queries, tuple[QueryCounts, ...]]):
    """Live queries (queued, leased): counts, and the ``top`` sites of each status (for
    /health and /metrics; 0: counts only)."""

    top: int = 0

    def check(self) -> None:
        check_int("top", self.top, 0, MAX_LIMIT)


@QUERIES.on(CountQueries)
def count(turn: QueryTurn, m: CountQueries) -> tuple[QueryCounts, ...]:
    return tuple(_count(turn.conn, status, m.top) for status in sql.LIVE)


def _count(conn: Connection, status: str, top: int) -> QueryCounts:
    n, sites = sql.count_live(conn, status)
    by_site = {r["site"]: r["n"] for r in sql.live_sites(conn, status, top)} if top else {}
    return QueryCounts(status, n, sites, by_site)


@dataclass(frozen=True)
class ListQuerySites(ListPage[Queries, QuerySite]):
    """Sites with live queries, the most first (then by name)."""


@QUERIES.on(ListQuerySites)
def sites_page(turn: QueryTurn, m: ListQuerySites) -> Paged[QuerySite]:
    return paged(sql.sites_page(turn.conn, m.page.limit, m.page.offset),
                 lambda row: QuerySite(row["site"], row["queued"], row["leased"]), m.page)
