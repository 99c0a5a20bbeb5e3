"""The ledger's periodic repairs: recovery of holds whose settle was lost or whose job
never came, and the purge of settled holds past retention."""

from __future__ import annotations

import logging
from typing import Final

from leasegate.actors.channels import Channel
from leasegate.actors.ledger.holds import settle
from leasegate.actors.ledger.turn import LedgerTurn
from leasegate.logs import escape
from leasegate.storage import ledger_sql as sql

log = logging.getLogger("leasegate.ledger")

RECOVER_BATCH = 1000  # holds one recovery run resolves per channel; more runs a second later
PURGE_BATCH = 2000
CHANNELS: Final[tuple[Channel, ...]] = ("task", "query")


def recover(turn: LedgerTurn, now: float) -> bool:
    """Settle open holds whose own job is terminal (a settle was lost); refund those
    whose job does not exist or is not theirs, past ``ledger_orphan_max_age``. The
    holds of live and stale jobs are never among them.

    An orphan is refunded only once this gateway has served for
    ``ledger_orphan_max_age`` too: a hold left by a crash waits that long after the
    restart, the window its caller had to retry the submit (else a retry after a slow
    restart would meet 6004 for a job it was never told of)."""
    more = False
    orphan_before = now - turn.settings.ledger_orphan_max_age
    if orphan_before < turn.up_since:
        orphan_before = 0.0  # every orphan older than that predates this start: wait
    for channel in CHANNELS:
        rows = sql.recoverable(turn.conn, channel, orphan_before, RECOVER_BATCH)
        for row in rows:
            job_id = row["job_id"]
            if not row["own"]:
                settle(turn, channel, job_id, "orphaned", None)
                log.warning("recovery refunded an orphan hold (its job never came): "
                            "%s %s", channel, escape(job_id))
            else:
                settle(turn, channel, job_id, row["status"], row["cost"])
                log.info("recovery settled a hold whose settle was lost: %s %s %s",
                         channel, escape(job_id), row["status"])
        more = more or len(rows) == RECOVER_BATCH
    return more


def purge(turn: LedgerTurn, now: float) -> bool:
    """Delete settled holds past ``ledger_settled_retention``; True if more remain."""
    cutoff = now - turn.settings.ledger_settled_retention
    purged = sql.purge_settled_before(turn.conn, cutoff, PURGE_BATCH)
    if purged:
        log.info("purged %d settled holds past retention", purged)
    return purged == PURGE_BATCH
