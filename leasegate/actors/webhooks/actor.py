"""Opening the webhooks actor."""

from __future__ import annotations

from leasegate.actors.runtime.actor import Actor, Inbox
from leasegate.actors.webhooks import Webhooks, deliveries, endpoints
from leasegate.actors.webhooks.turn import WEBHOOKS, WebhookTurn
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.database import Database

MAILBOX_SIZE = 1024
MODULES = (endpoints, deliveries)
"""What the webhooks actor does (importing a module registers its handlers)."""


def open_webhooks(db: Database, clock: Clock, settings: Settings) -> Actor[Webhooks, WebhookTurn]:
    """The webhooks actor on ``db`` (not running yet: start ``actor.run``)."""
    actor = Actor("webhooks", Inbox(Webhooks, MAILBOX_SIZE), db, clock, WebhookTurn(settings),
                  WEBHOOKS, error_log_window=settings.error_log_window)
    actor.add_job("bound_pending", settings.housekeeping_interval, deliveries.bound_pending)
    return actor
