"""Opening the keys actor."""

from __future__ import annotations

from leasegate.actors.keys import Keys, records
from leasegate.actors.keys.turn import KEYS, KeysTurn
from leasegate.actors.runtime.actor import Actor, Inbox
from leasegate.clock import Clock
from leasegate.storage.database import Database

MAILBOX_SIZE = 1024
MODULES = (records,)
"""What the keys actor does (importing a module registers its handlers)."""


def open_keys(db: Database, clock: Clock,
              inbox: Inbox[Keys] | None = None) -> Actor[Keys, KeysTurn]:
    """The keys actor on ``db`` (not running yet: start ``actor.run``)."""
    return Actor("keys", inbox or Inbox(Keys, MAILBOX_SIZE), db, clock, KeysTurn(), KEYS)
