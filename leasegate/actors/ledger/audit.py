"""The books' checks: on demand (:class:`RunAudit`), every ``ledger_audit_interval``
(a periodic job) and at start-up, where a failing one refuses to serve."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from leasegate.actors.ledger import Ledger
from leasegate.actors.ledger.turn import LEDGER, LedgerTurn
from leasegate.actors.ledger.views import AuditCheck, AuditReport
from leasegate.actors.runtime.mailbox import Ask
from leasegate.storage import ledger_sql as sql
from leasegate.storage.engine import Connection

log = logging.getLogger("leasegate.ledger")


class LedgerUnbalanced(RuntimeError):
    """The start-up audit failed; the message names the failing checks."""


PAST_INT64 = "cannot be summed: past 64-bit integers"


def audit(conn: Connection) -> AuditReport:
    """Check the books (on the database thread, inside the caller's transaction). It
    never raises for what it finds: a book whose sums leave 64-bit integers (an old
    database, written before the ledger's bounds) fails ``amounts_are_int64`` and each
    check whose sum it cannot take."""
    f = sql.audit_figures(conn)

    def listed(names: list[str] | None, what: str) -> str:
        if names is None:
            return PAST_INT64
        return f"{what}: {', '.join(map(str, names))}" if names else "none"

    sums, holds, opened = f["sum_balances"], f["holds_balance"], f["open_holds"]
    int64 = [listed(names, what) for names, what in (
        (f["not_integers"], "not integers (an overflow made them reals)"),
        (f["overflowing"], "sums past 64-bit integers")) if names]
    checks = (
        AuditCheck("amounts_are_int64", not int64, "; ".join(int64) or "none"),
        AuditCheck("balances_sum_to_zero", sums == 0,
                   PAST_INT64 if sums is None else f"sum of all balances: {sums}"),
        AuditCheck("transactions_balanced", f["unbalanced_txns"] == [],
                   listed(f["unbalanced_txns"], "transactions whose lines do not sum to 0")),
        AuditCheck("holds_equal_open_holds", holds is not None and holds == opened,
                   PAST_INT64 if None in (holds, opened)
                   else f"@holds: {holds}, open holds: {opened}"),
        AuditCheck("balances_match_journal", f["cache_mismatch"] == [],
                   listed(f["cache_mismatch"], "accounts whose balance differs from the "
                          "journal")),
        AuditCheck("held_matches_open_holds", f["held_mismatch"] == [],
                   listed(f["held_mismatch"], "accounts whose held differs from their "
                          "open holds")),
        AuditCheck("settled_holds_resolved", f["unresolved"] == [],
                   listed(f["unresolved"], "settled holds whose charge + refund is not "
                          "the hold")),
        AuditCheck("no_negative_balance", f["negative"] == [],
                   listed(f["negative"], "tenant accounts below zero")),
    )
    return AuditReport(all(check.ok for check in checks), checks)


@dataclass(frozen=True)
class RunAudit(Ask[Ledger, AuditReport]):
    """Check the books now: balances sum to zero, ``@holds`` equals the open holds,
    cached balances equal the journal, settled holds are charged + refunded in full."""


@LEDGER.on(RunAudit)
def run_audit(turn: LedgerTurn, m: RunAudit) -> AuditReport:
    report = audit(turn.conn)
    turn.after_commit(lambda: _audited(turn, report))
    return report


def audit_job(turn: LedgerTurn, now: float) -> None:
    """The periodic job: a failing audit is logged, and shown by /health and /metrics."""
    report = audit(turn.conn)
    if not report.ok:
        log.error("ledger audit failed: %s", ", ".join(report.failing()))
    turn.after_commit(lambda: _audited(turn, report))


def _audited(turn: LedgerTurn, report: AuditReport) -> None:
    turn.last_audit = report
