"""The query actor's table, turn context and handler registry."""

from __future__ import annotations

from typing import Final

from leasegate.actors.queries import Queries
from leasegate.actors.queries.views import QueryView, query_view
from leasegate.actors.queue.leasing import TELL_PRESENCE_EVERY, PresenceTeller
from leasegate.actors.queue.turn import JobKind, QueueTurn
from leasegate.actors.runtime.handlers import Handlers
from leasegate.errors import QueryNotFound
from leasegate.storage import queries_sql as sql
from leasegate.storage.engine import Row

QUERY_KIND: Final = JobKind(
    actor="queries", channel="query", noun="query", id_prefix="q", id_column="query_id",
    settled=sql.TERMINAL, terminal=sql.TERMINAL, jobs=sql.JOBS, not_found=QueryNotFound)
"""Queries as the code both queues share reads them: a waiting read returns once
the query is terminal."""


class QueryTurn(QueueTurn[QueryView]):
    """Beyond what both queues keep (see ``QueueTurn``), whom it told of the workers it
    saw (``presence``: the task actor keeps worker presence)."""

    presence = PresenceTeller(None, TELL_PRESENCE_EVERY)

    def view(self, row: Row) -> QueryView:
        return query_view(row)

    def retry_expiry(self, row: Row) -> float:
        """``query_ttl`` from now: a retried query's attempts start afresh, its TTL too."""
        return self.now + self.settings.query_ttl


QUERIES = Handlers(Queries, QueryTurn)
"""What the query actor does with each message (filled in by its message modules)."""
