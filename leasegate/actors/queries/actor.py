"""Opening the query actor."""

from __future__ import annotations

from leasegate.actors.event_stream import EventHub
from leasegate.actors.ledger import LedgerRef
from leasegate.actors.queries import Queries, deadlines, lease, operator, reads, results, submit
from leasegate.actors.queries.turn import QUERIES, QUERY_KIND, QueryTurn
from leasegate.actors.queue.leasing import TELL_PRESENCE_EVERY, PresenceTeller, SeenOnQueries
from leasegate.actors.runtime.actor import Actor, Inbox
from leasegate.actors.runtime.turn import Receiver
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.database import Database

MODULES = (submit, reads, lease, results, deadlines, operator)
"""What the query actor does, module by module (importing one registers its handlers)."""


def open_queries(db: Database, clock: Clock, settings: Settings, *,
                 inbox: Inbox[Queries] | None = None, ledger: LedgerRef | None = None,
                 events: EventHub | None = None,
                 presence: Receiver[SeenOnQueries] | None = None) -> Actor[Queries, QueryTurn]:
    """The query actor on ``db`` (not running yet), settling holds with ``ledger``,
    streaming its events to ``events`` and telling ``presence`` (the task actor) of the
    workers it sees."""
    turn = QueryTurn(QUERY_KIND, settings, ledger=ledger, events=events)
    turn.presence = PresenceTeller(presence, min(TELL_PRESENCE_EVERY,
                                                 settings.worker_offline_after / 3))
    actor = Actor("queries", inbox or Inbox(Queries), db, clock, turn, QUERIES,
                  error_log_window=settings.error_log_window)
    actor.add_job("purge_queries", settings.housekeeping_interval, deadlines.purge)
    return actor
