"""The ledger actor: prepaid holds, settlement, recovery and audit, in double entry.

Accounts: one per tenant, plus ``@world`` (money coming in), ``@holds``
(reserved) and ``@revenue`` (earned). ``credit`` is ``@world -> tenant``; a
hold is ``tenant -> @holds``; a settlement moves the charge ``@holds ->
@revenue`` and the rest ``@holds -> tenant``. Every transaction's lines sum
to zero, so the balances always do. Money enters only by a credit, which may not
take ``@world`` past ``-ledger_max_balance``: so no balance, and no sum of balances,
can leave 64-bit integers (see ``Settings.ledger_max_balance``); one credit or hold is
at most ``ledger_max_amount``. Past either: 6010 (``LedgerLimit``), nothing moves.

Settlement (at most once per job; a second settle changes nothing): a
succeeded job is charged the cost it reported, or the full hold if none; a
failed, canceled or expired job what the worker reported as delivered, else
nothing; always capped at the hold. A stale task's hold stays open until the
task is resolved (reclaim or late result).

The saga of a submit with ``max_cost`` (``leasegate.actors.billing``), and
what repairs a crash (or a lost message) between any two steps:

1. The job id is chosen (the client's, or a generated one) and the ledger is
   asked for the hold. Crash before the hold commits: nothing happened; the
   client retries. Short funds: 6007, nothing enqueued.
2. The hold is committed, then the queue actor is asked to enqueue. Crash (or
   the caller gone) before the job commits: an open hold without a job.
   Repaired by recovery: a hold whose job does not exist is refunded once it
   is older than ``ledger_orphan_max_age`` (which the settings keep greater
   than ``task_hard_timeout``, so no job that could still be running loses
   its hold). A retry of the submit meanwhile reuses the same hold (idempotent
   by job id); a retry after the refund is refused (6004): the id's hold is
   settled, and a job must never run without one.
3. The queue refuses the submit (6004, a bad field, storage trouble): the
   hold this submit placed is released (refunded) at once. Crash before the
   release: as in 2, recovery refunds it past the orphan age, also when a job
   with this id exists but is not the hold's (another tenant, another or no
   ``max_cost``): that job's outcome is never charged to it. A hold that a
   job with this id, tenant and amount exists for is never released.
4. The job runs. Its hold stays open whatever happens (lease expiry, stale,
   pause) until the job is terminal; recovery never touches the hold of a
   job that exists and is not terminal.
5. The job ends: the queue actor commits the terminal state, then tells the
   ledger ``Settle`` (after its commit, without waiting). Crash between the
   commit and the settle, or a full ledger inbox, or a ledger already closed
   at shutdown: the settle is lost. Repaired by recovery (every
   ``ledger_recover_interval``): an open hold whose job is terminal is
   settled from the job's row (the same status and cost the message would
   have carried).
6. Settle and recovery race: both run inside this actor, one after the
   other, and both settle only a hold that is still open (a conditional
   update). Whichever comes first settles; the other changes nothing.
7. After ``ledger_settled_retention`` the settled hold row is deleted; the
   journal stays, and the job id stays in ``ledger_settled_jobs``, so a
   settle or a hold of that job id later changes nothing: it is never
   refunded or held again.

Recovery learns the jobs' states by reading the queue tables directly (a
read-only SELECT on the same database file, see ``storage/ledger_sql``): the
queue actors ask the ledger, so the ledger must never ask them back (two
bounded inboxes waiting on each other could deadlock).
"""

from __future__ import annotations

import logging
import sqlite3

from leasegate.actors.batches import EachItem
from leasegate.actors.history import SettledNotices
from leasegate.actors.ledger_messages import (
    Credit,
    GetAccount,
    HoldsOf,
    ListAccounts,
    ListEntries,
    ListHolds,
    PlaceHold,
    PlaceHolds,
    ReleaseHold,
    RunAudit,
    Settle,
)
from leasegate.actors.ledger_views import (
    AuditCheck,
    AuditReport,
    HoldPlaced,
    account_view,
    entry_view,
    hold_view,
)
from leasegate.actors.legacy_runtime import Actor
from leasegate.actors.mailbox import Ask, Tell
from leasegate.actors.pages import Paged
from leasegate.clock import Clock
from leasegate.errors import (
    IdempotencyConflict,
    InsufficientFunds,
    InvalidRequest,
    LedgerLimit,
)
from leasegate.logs import escape
from leasegate.settings import Settings
from leasegate.storage import ledger_sql as sql
from leasegate.storage.connection import Database

log = logging.getLogger("leasegate.ledger")

RECOVER_BATCH = 1000  # holds one recovery run resolves per channel; more runs a second later
PURGE_BATCH = 2000


class LedgerUnbalanced(RuntimeError):
    """The start-up audit failed; the message names the failing checks."""


PAST_INT64 = "cannot be summed: past 64-bit integers"


def audit(conn: sqlite3.Connection) -> AuditReport:
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


def charge_for(amount: int, outcome: str, cost: int | None) -> int:
    """What a job that ended with ``outcome`` pays of its hold of ``amount``."""
    if cost is None:
        return amount if outcome == "succeeded" else 0
    return min(cost, amount)


class Ledger(Actor, EachItem):
    name = "ledger"

    def __init__(self, db: Database, clock: Clock, settings: Settings) -> None:
        super().__init__(db, clock, error_log_window=settings.error_log_window)
        self.settings = settings
        self.last_audit: AuditReport | None = None  # set on the trio thread only
        # After each settle's commit, the job's queue records it in the job's history.
        self.settled_notices = SettledNotices(self)
        self.add_job("recover_holds", settings.ledger_recover_interval, self._recover)
        self.add_job("purge_settled_holds", settings.housekeeping_interval, self._purge)
        self.add_job("audit", settings.ledger_audit_interval, self._audit_job)

    def handle(self, conn: sqlite3.Connection, message: Ask[object] | Tell) -> object:
        now = self.now
        match message:
            case PlaceHold():
                return self._hold(conn, message, now)
            case PlaceHolds():
                return self.each(conn, message.items, lambda c, m: self._hold(c, m, now))
            case Settle():
                self._settle(conn, message.channel, message.job_id, message.outcome,
                             message.cost, now)
                return None
            case ReleaseHold():
                return self._release(conn, message, now)
            case Credit():
                return self._credit(conn, message, now)
            case GetAccount():
                return account_view(message.account, sql.account(conn, message.account))
            case ListEntries():
                page = message.page
                total, rows = sql.entries(conn, message.account, page.limit, page.offset)
                return Paged(tuple(entry_view(r) for r in rows), total, page.limit, page.offset)
            case ListAccounts():
                page = message.page
                total, rows = sql.page_accounts(conn, page.limit, page.offset)
                return Paged(tuple(account_view(r["account"], r) for r in rows), total,
                             page.limit, page.offset)
            case ListHolds():
                page = message.page
                total, rows = sql.page_holds(conn, message.account, message.status,
                                             page.limit, page.offset)
                return Paged(tuple(hold_view(r) for r in rows), total, page.limit, page.offset)
            case HoldsOf():
                if not message.job_ids:
                    return ()
                return tuple(hold_view(r) for r in
                             sql.holds_of(conn, message.channel, list(message.job_ids)))
            case RunAudit():
                report = audit(conn)
                self.after_commit(lambda: self._audited(report))
                return report
        raise InvalidRequest(f"ledger: not a ledger message: {type(message).__name__}")

    # ---- holds ----

    def _hold(self, conn: sqlite3.Connection, m: PlaceHold, now: float) -> HoldPlaced:
        row = sql.hold(conn, m.channel, m.job_id)
        if row is not None and (row["account"] != m.account or row["amount"] != m.amount):
            raise IdempotencyConflict(f"{m.channel} {m.job_id} is held with another "
                                      "account or amount")
        settled = sql.was_settled(conn, m.channel, m.job_id)
        if settled and not sql.job_known(conn, m.channel, m.job_id):
            # Refunded as an orphan (its submit never completed) or forgotten past the
            # tombstone's retention: never held again, and never run without a hold.
            raise IdempotencyConflict(f"the hold of {m.channel} {m.job_id} was settled and "
                                      "no job took it; submit under another id")
        if row is not None:
            return HoldPlaced(m.job_id, row["status"], created=False)
        if settled:
            return HoldPlaced(m.job_id, "settled", created=False)  # never held again
        self._within_max_amount("max_cost", m.amount)
        found = sql.account(conn, m.account)
        available = 0 if found is None else int(found["balance"])
        if available < m.amount:
            raise InsufficientFunds(f"account {m.account} has {available} available; "
                                    f"max_cost {m.amount} cannot be held")
        sql.open_hold(conn, m.channel, m.job_id, m.account, m.amount, now)
        sql.add_held(conn, m.account, m.amount, now)
        if m.amount:
            sql.post(conn, "hold", m.job_id, f"hold for {m.channel} {m.job_id}", now,
                     [(m.account, -m.amount), ("@holds", m.amount)])
        return HoldPlaced(m.job_id, "open", created=True)

    def _settle(self, conn: sqlite3.Connection, channel: str, job_id: str, outcome: str,
                cost: int | None, now: float) -> bool:
        """Resolve an open hold; False (nothing changed) if there is none open."""
        row = sql.hold(conn, channel, job_id)
        if row is None or row["status"] != "open":
            return False
        amount, account = int(row["amount"]), str(row["account"])
        charge = charge_for(amount, outcome, cost)
        refund = amount - charge
        if not sql.close_hold(conn, channel, job_id, charge, refund, outcome, now):
            return False
        sql.add_held(conn, account, -amount, now)
        memo = f"{channel} {job_id} {outcome}"
        if charge:
            sql.post(conn, "charge", job_id, memo, now,
                     [("@holds", -charge), ("@revenue", charge)])
        if refund:
            sql.post(conn, "refund", job_id, memo, now, [("@holds", -refund), (account, refund)])
        self.settled_notices.settled(channel, job_id, outcome, charge, refund)
        return True

    def _release(self, conn: sqlite3.Connection, m: ReleaseHold, now: float) -> bool:
        row = sql.hold(conn, m.channel, m.job_id)
        if row is None or row["status"] != "open":
            return False
        job = sql.job_state(conn, m.channel, m.job_id)
        if (job is not None and job["tenant"] == row["account"]
                and job["max_cost"] == row["amount"]):
            return False  # a job (an identical concurrent submit) holds it: settled later
        if not sql.drop_open_hold(conn, m.channel, m.job_id):
            return False
        amount, account = int(row["amount"]), str(row["account"])
        sql.add_held(conn, account, -amount, now)
        if amount:
            sql.post(conn, "refund", m.job_id, f"released: the submit of {m.channel} "
                     f"{m.job_id} was refused", now, [("@holds", -amount), (account, amount)])
        log.info("hold released, its submit was refused: %s %s", m.channel, escape(m.job_id))
        return True

    def _credit(self, conn: sqlite3.Connection, m: Credit, now: float) -> object:
        existing = sql.credit_by_ref(conn, m.ref)
        if existing is not None:
            if existing["account"] != m.account or existing["amount"] != m.amount:
                raise IdempotencyConflict(f"credit {m.ref} was made with another account "
                                          "or amount")
        else:
            self._within_max_amount("amount", m.amount)
            self._within_max_balance(conn, m)
            txn_id = sql.post(conn, "credit", m.ref, m.memo, now,
                              [("@world", -m.amount), (m.account, m.amount)])
            sql.record_credit(conn, m.ref, m.account, m.amount, txn_id, now)
        return account_view(m.account, sql.account(conn, m.account))

    # ---- bounds (see Settings.ledger_max_balance for why they keep every sum in int64) ----

    def _within_max_amount(self, name: str, amount: int) -> None:
        most = self.settings.ledger_max_amount
        if amount > most:
            raise LedgerLimit(f"{name} {amount} is over ledger_max_amount ({most})")

    def _within_max_balance(self, conn: sqlite3.Connection, m: Credit) -> None:
        """Money enters only here: a credit may not take ``@world`` past
        ``-ledger_max_balance``, which bounds every other account and every sum."""
        credited = -sql.balance(conn, "@world")  # an int; a float only in a broken book
        most = self.settings.ledger_max_balance
        if credited + m.amount > most:
            raise LedgerLimit(f"a credit of {m.amount} would bring the money ever credited "
                              f"(now {credited!r}) over ledger_max_balance ({most})")

    # ---- periodic jobs ----

    def _recover(self, conn: sqlite3.Connection, now: float) -> bool:
        """Settle open holds whose own job is terminal (a settle was lost); refund those
        whose job does not exist or is not theirs, past ``ledger_orphan_max_age``. The
        holds of live and stale jobs are never among them."""
        more = False
        orphan_before = now - self.settings.ledger_orphan_max_age
        for channel in ("task", "query"):
            rows = sql.recoverable(conn, channel, orphan_before, RECOVER_BATCH)
            for row in rows:
                job_id = row["job_id"]
                if not row["own"]:
                    self._settle(conn, channel, job_id, "orphaned", None, now)
                    log.warning("recovery refunded an orphan hold (its job never came): "
                                "%s %s", channel, escape(job_id))
                else:
                    self._settle(conn, channel, job_id, row["status"], row["cost"], now)
                    log.info("recovery settled a hold whose settle was lost: %s %s %s",
                             channel, escape(job_id), row["status"])
            more = more or len(rows) == RECOVER_BATCH
        return more

    def _purge(self, conn: sqlite3.Connection, now: float) -> bool:
        cutoff = now - self.settings.ledger_settled_retention
        purged = sql.purge_settled_before(conn, cutoff, PURGE_BATCH)
        if purged:
            log.info("purged %d settled holds past retention", purged)
        return purged == PURGE_BATCH

    def _audit_job(self, conn: sqlite3.Connection, now: float) -> None:
        report = audit(conn)
        if not report.ok:
            log.error("ledger audit failed: %s", ", ".join(report.failing()))
        self.after_commit(lambda: self._audited(report))

    def _audited(self, report: AuditReport) -> None:
        self.last_audit = report
