"""Opening the ledger."""

from __future__ import annotations

from collections.abc import Mapping

from leasegate.actors.channels import Channel, RecordSettled
from leasegate.actors.ledger import Ledger, accounts, audit, holds, recovery
from leasegate.actors.ledger.turn import LEDGER, LedgerTurn
from leasegate.actors.runtime.actor import Actor, Inbox
from leasegate.actors.runtime.turn import Receiver
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.database import Database

MODULES = (holds, accounts, audit, recovery)
"""What the ledger does, module by module (importing one registers its handlers)."""


def open_ledger(db: Database, clock: Clock, settings: Settings, *,
                inbox: Inbox[Ledger] | None = None,
                queues: Mapping[Channel, Receiver[RecordSettled]] | None = None,
                ) -> Actor[Ledger, LedgerTurn]:
    """The ledger on ``db`` (not running yet), telling ``queues`` of each settlement."""
    actor = Actor("ledger", inbox or Inbox(Ledger), db, clock,
                  LedgerTurn(settings, queues or {}), LEDGER,
                  error_log_window=settings.error_log_window)
    actor.turn.up_since = clock.now()
    actor.add_job("recover_holds", settings.ledger_recover_interval, recovery.recover)
    actor.add_job("purge_settled_holds", settings.housekeeping_interval, recovery.purge)
    actor.add_job("audit", settings.ledger_audit_interval, audit.audit_job)
    return actor
