"""SQL of the ledger (owned by the ledger actor): accounts, journal, holds, credits.

Amounts are integers in minor units. Every journal transaction's lines sum to
zero; each account's cached ``balance`` is the sum of its lines, and ``held``
is the sum of its open holds. A hold is keyed by its job (channel + job id);
``ledger_settled_jobs`` remembers every settled job id for good (a few bytes a
job), so a settled job can never be held or refunded again after its hold row
is deleted by retention.

The one exception to "each actor reads only its own tables": recovery and the
release of a refused submit *read* the ``tasks`` and ``queries`` tables
(:func:`job_state`, :func:`recoverable`) — a read-only SELECT on the same
database file, never a write. Asking the queue actors instead would make the
ledger send requests to them while they send requests to the ledger (a cycle
of bounded inboxes that can deadlock); a read of committed rows needs no
mailbox at all.
"""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from typing import Any, Final

from leasegate.storage.engine import Connection, Row, Spelled, dialect, respelled
from leasegate.storage.pages import page_rows
from leasegate.storage.rows import marks

SYSTEM_ACCOUNTS = ("@world", "@holds", "@revenue")
TABLES = {"task": ("tasks", "task_id"), "query": ("queries", "query_id")}
TERMINAL = {"task": ("succeeded", "failed", "canceled", "expired"),
            "query": ("succeeded", "failed", "expired")}

# PostgreSQL has no lastrowid: its insert returns the id (postgres.connection.Cursor).
_NEW_TXN_TEXT = "INSERT INTO ledger_txns (kind, ref, memo, created_at) VALUES (?, ?, ?, ?)"
_NEW_TXN = Spelled(_NEW_TXN_TEXT, _NEW_TXN_TEXT + " RETURNING txn_id")


# ---- accounts and journal --------------------------------------------------------

def account(conn: Connection, name: str) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT * FROM ledger_accounts WHERE account = ?", (name,)).fetchone()
    return row


def balance(conn: Connection, name: str) -> int | float:
    """An account's balance (0 if nothing ever moved in it): an int, unless an old
    database let SQLite turn an overflowing sum into a REAL (the audit reports it)."""
    row = conn.execute("SELECT balance FROM ledger_accounts WHERE account = ?",
                       (name,)).fetchone()
    return 0 if row is None else row[0]


def post(conn: Connection, kind: str, ref: str, memo: str | None, now: float,
         lines: list[tuple[str, int]]) -> int:
    """One journal transaction; ``lines`` (account, signed amount) must sum to zero.
    Zero lines are left out; the accounts' cached balances follow."""
    assert sum(amount for _, amount in lines) == 0, lines
    cur = conn.execute(_NEW_TXN, (kind, ref, memo, now))
    txn_id = int(cur.lastrowid or 0)
    for name, amount in lines:
        if amount == 0:
            continue
        conn.execute("INSERT INTO ledger_lines (txn_id, account, amount) VALUES (?, ?, ?)",
                     (txn_id, name, amount))
        # ledger_accounts.balance: PostgreSQL finds a bare name ambiguous beside
        # excluded.balance (SQLite runs both spellings as one).
        conn.execute("INSERT INTO ledger_accounts (account, balance, created_at) "
                     "VALUES (?, ?, ?) ON CONFLICT (account) "
                     "DO UPDATE SET balance = ledger_accounts.balance + excluded.balance",
                     (name, amount, now))
    return txn_id


def add_held(conn: Connection, name: str, delta: int, now: float) -> None:
    conn.execute("INSERT INTO ledger_accounts (account, held, created_at) VALUES (?, ?, ?) "
                 "ON CONFLICT (account) DO UPDATE SET held = ledger_accounts.held + "
                 "excluded.held", (name, delta, now))


def entries(conn: Connection, name: str, limit: int,
            offset: int) -> tuple[int, list[Row]]:
    """``(total, rows)`` of an account's journal lines, newest first."""
    total = conn.execute("SELECT count(*) FROM ledger_lines WHERE account = ?",
                         (name,)).fetchone()[0]
    rows = conn.execute(
        "SELECT l.txn_id, t.kind, l.amount, t.ref, t.memo, t.created_at "
        "FROM ledger_lines l JOIN ledger_txns t ON t.txn_id = l.txn_id "
        "WHERE l.account = ? ORDER BY l.txn_id DESC, l.rowid DESC LIMIT ? OFFSET ?",
        (name, limit, offset)).fetchall()
    return int(total), rows


def credit_by_ref(conn: Connection, ref: str) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT * FROM ledger_credits WHERE ref = ?", (ref,)).fetchone()
    return row


def record_credit(conn: Connection, ref: str, name: str, amount: int, txn_id: int,
                  now: float) -> None:
    conn.execute("INSERT INTO ledger_credits (ref, account, amount, txn_id, created_at) "
                 "VALUES (?, ?, ?, ?, ?)", (ref, name, amount, txn_id, now))


# ---- holds -----------------------------------------------------------------------

def hold(conn: Connection, channel: str, job_id: str) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT * FROM ledger_holds WHERE channel = ? AND job_id = ?",
        (channel, job_id)).fetchone()
    return row


def holds_of(conn: Connection, channel: str, job_ids: list[str]) -> list[Row]:
    return conn.execute(f"SELECT * FROM ledger_holds WHERE channel = ? AND job_id IN "
                        f"({marks(job_ids)})", [channel, *job_ids]).fetchall()


def was_settled(conn: Connection, channel: str, job_id: str) -> bool:
    return conn.execute("SELECT 1 FROM ledger_settled_jobs WHERE channel = ? AND job_id = ?",
                        (channel, job_id)).fetchone() is not None


def open_hold(conn: Connection, channel: str, job_id: str, name: str, amount: int,
              now: float) -> None:
    conn.execute("INSERT INTO ledger_holds (channel, job_id, account, amount, status, "
                 "created_at) VALUES (?, ?, ?, ?, 'open', ?)",
                 (channel, job_id, name, amount, now))


def close_hold(conn: Connection, channel: str, job_id: str, charged: int,
               refunded: int, outcome: str, now: float) -> bool:
    """Mark an open hold settled (and its job id settled for good); False if it was not
    open (a second settle changes nothing)."""
    cur = conn.execute(
        "UPDATE ledger_holds SET status = 'settled', charged = ?, refunded = ?, outcome = ?, "
        "settled_at = ? WHERE channel = ? AND job_id = ? AND status = 'open'",
        (charged, refunded, outcome, now, channel, job_id))
    if cur.rowcount != 1:
        return False
    conn.execute("INSERT INTO ledger_settled_jobs (channel, job_id, settled_at) "
                 "VALUES (?, ?, ?) ON CONFLICT DO NOTHING", (channel, job_id, now))
    return True


def drop_open_hold(conn: Connection, channel: str, job_id: str) -> bool:
    """Forget an open hold whose submit was refused (its money is refunded by the
    caller): no job took it, so the id may be held again by an honest retry."""
    cur = conn.execute("DELETE FROM ledger_holds WHERE channel = ? AND job_id = ? "
                       "AND status = 'open'", (channel, job_id))
    return cur.rowcount == 1


def page_accounts(conn: Connection, limit: int,
                  offset: int) -> tuple[int, list[Row]]:
    return page_rows(conn, "ledger_accounts", {}, limit, offset)


def page_holds(conn: Connection, name: str | None, status: str | None, limit: int,
               offset: int) -> tuple[int, list[Row]]:
    return page_rows(conn, "ledger_holds", {"account": name, "status": status}, limit, offset)


def purge_settled_before(conn: Connection, cutoff: float, limit: int) -> int:
    """Delete settled holds past retention (the journal and the settled job ids stay)."""
    cur = conn.execute(_PURGE_SETTLED, (cutoff, limit))
    return cur.rowcount


# SQLite finds each row by its rowid (its table's key); PostgreSQL's rowid column has no
# index: there the primary key finds them.
_PURGE_SETTLED = respelled(
    "DELETE FROM ledger_holds WHERE rowid IN (SELECT rowid FROM ledger_holds "
    "WHERE status = 'settled' AND settled_at < ? LIMIT ?)",
    ("rowid IN (SELECT rowid FROM", "(channel, job_id) IN (SELECT channel, job_id FROM"))


# ---- the jobs' state (read-only; see the module docstring) ------------------------

def job_state(conn: Connection, channel: str, job_id: str) -> Row | None:
    """The job's tenant, max_cost, status and cost, read from its queue's table."""
    table, key = TABLES[channel]
    row: Row | None = conn.execute(
        f"SELECT tenant, max_cost, status, cost FROM {table} WHERE {key} = ?",
        (job_id,)).fetchone()
    return row


def job_known(conn: Connection, channel: str, job_id: str) -> bool:
    """Whether a job with this id exists, or existed and left its tombstone."""
    table, key = TABLES[channel]
    return conn.execute(f"SELECT 1 FROM {table} WHERE {key} = ? UNION ALL "
                        f"SELECT 1 FROM {channel}_tombstones WHERE {key} = ?",
                        (job_id, job_id)).fetchone() is not None


def recoverable(conn: Connection, channel: str, orphan_before: float,
                limit: int) -> list[Row]:
    """Open holds recovery must resolve: those whose own job is terminal, and orphans
    opened before ``orphan_before``: holds whose job does not exist, or whose job is
    not theirs (another tenant's or amount's: the hold of a refused submit whose release
    was lost). ``own`` tells which. A hold of its own live, stale or paused job is never
    among them."""
    terminal = TERMINAL[channel]
    return conn.execute(_RECOVERABLE[channel],
                        [channel, *terminal, orphan_before, limit]).fetchall()


def _recoverable(channel: str) -> Spelled:
    table, key = TABLES[channel]
    own = (f"(j.{key} IS NOT NULL AND j.tenant = h.account "
           f"AND j.max_cost IS h.amount)")
    return respelled(
        f"SELECT h.job_id, h.created_at, j.status, j.cost, {own} AS own "
        f"FROM ledger_holds h LEFT JOIN {table} j ON j.{key} = h.job_id "
        f"WHERE h.status = 'open' AND h.channel = ? AND "
        f"(({own} AND j.status IN ({marks(TERMINAL[channel])})) "
        f" OR (NOT {own} AND h.created_at < ?)) "
        f"ORDER BY h.created_at LIMIT ?",
        ("j.max_cost IS h.amount", "j.max_cost IS NOT DISTINCT FROM h.amount"))


_RECOVERABLE = {channel: _recoverable(channel) for channel in TABLES}


# ---- audit -----------------------------------------------------------------------

def audit_figures(conn: Connection) -> dict[str, Any]:
    """Everything the audit compares, in one read.

    Under the ledger's bounds no sum here can leave 64-bit integers (see
    ``Settings.ledger_max_balance``): each account's journal is summed in its own order
    (the ``ledger_lines_account`` index), so every partial sum is a balance the account
    once had. An old database written before the bounds may hold more, or balances that
    SQLite turned into REALs on overflow: a figure it cannot sum is None (and named in
    ``overflowing``), and amounts that are not integers are listed in ``not_integers``,
    for the audit to report rather than fail."""
    if dialect(conn) == "postgresql":
        return _audit_figures_at_once(conn)
    overflowing: list[str] = []

    def figure(name: str, query: str) -> Any:
        try:
            return conn.execute(query).fetchall()
        except sqlite3.OperationalError as exc:  # SQLite's sum() of 64-bit integers
            if "integer overflow" not in str(exc):
                raise
            overflowing.append(name)
            return None

    def first(rows: list[Any] | None) -> Any:
        # PostgreSQL sums bigints as numeric (a Decimal): whole, so an int again.
        return None if rows is None else _whole(rows[0][0])

    def names(rows: list[Any] | None) -> list[Any] | None:
        return None if rows is None else [r[0] for r in rows]

    return {
        "sum_balances": first(figure("balances", "SELECT coalesce(sum(balance), 0) "
                                     "FROM ledger_accounts")),
        "holds_balance": first(figure("@holds", "SELECT coalesce(sum(balance), 0) FROM "
                                      "ledger_accounts WHERE account = '@holds'")),
        "open_holds": first(figure("open holds", "SELECT coalesce(sum(amount), 0) FROM "
                                   "ledger_holds WHERE status = 'open'")),
        "unbalanced_txns": names(figure("transactions", _UNBALANCED_TXNS)),
        "cache_mismatch": names(figure("journals", _CACHE_MISMATCH)),
        "held_mismatch": names(figure("held", _HELD_MISMATCH)),
        "unresolved": names(figure("settled holds", _UNRESOLVED)),
        "negative": names(figure("tenants", _NEGATIVE)),
        "not_integers": names(figure("types", _NOT_INTEGERS)) or [],
        "overflowing": overflowing,
    }


_UNBALANCED_TXNS = ("SELECT txn_id FROM ledger_lines GROUP BY txn_id HAVING sum(amount) <> 0 "
                    "ORDER BY txn_id LIMIT 10")
_CACHE_MISMATCH = (
    "SELECT a.account FROM ledger_accounts a LEFT JOIN "
    "(SELECT account, sum(amount) AS total FROM ledger_lines GROUP BY account) j "
    "ON j.account = a.account WHERE a.balance <> coalesce(j.total, 0) "
    "UNION SELECT j.account FROM (SELECT DISTINCT account FROM ledger_lines) j "
    "WHERE j.account NOT IN (SELECT account FROM ledger_accounts) LIMIT 10")
_HELD_MISMATCH = (
    "SELECT a.account FROM ledger_accounts a LEFT JOIN "
    "(SELECT account, sum(amount) AS total FROM ledger_holds WHERE status = 'open' "
    "GROUP BY account) h ON h.account = a.account "
    "WHERE a.held <> coalesce(h.total, 0) LIMIT 10")
_UNRESOLVED = ("SELECT job_id FROM ledger_holds WHERE status = 'settled' "
               "AND charged + refunded <> amount LIMIT 10")
_NEGATIVE = ("SELECT account FROM ledger_accounts WHERE account NOT LIKE '@%' "
             "AND (balance < 0 OR held < 0) LIMIT 10")
# PostgreSQL's columns are bigint: nothing there can be anything but an integer.
_NOT_INTEGERS = Spelled(
    "SELECT 'account ' || account FROM ledger_accounts "
    "WHERE typeof(balance) <> 'integer' OR typeof(held) <> 'integer' "
    "UNION ALL SELECT 'journal line of transaction ' || txn_id FROM ledger_lines "
    "WHERE typeof(amount) <> 'integer' "
    "UNION ALL SELECT 'hold of ' || job_id FROM ledger_holds "
    "WHERE typeof(amount) <> 'integer' OR typeof(coalesce(charged, 0)) <> 'integer' "
    "OR typeof(coalesce(refunded, 0)) <> 'integer' LIMIT 10",
    "SELECT NULL WHERE false")


_LISTS: Final = (("unbalanced_txns", _UNBALANCED_TXNS), ("cache_mismatch", _CACHE_MISMATCH),
                 ("held_mismatch", _HELD_MISMATCH), ("unresolved", _UNRESOLVED),
                 ("negative", _NEGATIVE))
# PostgreSQL: every figure in one statement, so one snapshot (READ COMMITTED takes one
# per statement): a consistent book while other gateways' ledger turns commit, without
# a lock that would stop them.
_AUDIT_AT_ONCE: Final = (
    "SELECT (SELECT coalesce(sum(balance), 0) FROM ledger_accounts), "
    "(SELECT coalesce(sum(balance), 0) FROM ledger_accounts WHERE account = '@holds'), "
    "(SELECT coalesce(sum(amount), 0) FROM ledger_holds WHERE status = 'open'), "
    + ", ".join(f"ARRAY({query})" for _, query in _LISTS))


def _audit_figures_at_once(conn: Connection) -> dict[str, Any]:
    row = conn.execute(_AUDIT_AT_ONCE).fetchone()
    figures: dict[str, Any] = {
        "sum_balances": _whole(row[0]), "holds_balance": _whole(row[1]),
        "open_holds": _whole(row[2]), "not_integers": [], "overflowing": []}
    figures.update((name, list(row[3 + i])) for i, (name, _) in enumerate(_LISTS))
    return figures


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, Decimal) else value
