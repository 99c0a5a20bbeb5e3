CREATE TABLE ledger_accounts (
    account    TEXT PRIMARY KEY,
    balance    INTEGER NOT NULL DEFAULT 0,
    held       INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE TABLE ledger_txns (
    txn_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL CHECK (kind IN ('credit', 'hold', 'charge', 'refund')),
    ref        TEXT NOT NULL,
    memo       TEXT,
    created_at REAL NOT NULL
);
CREATE TABLE ledger_lines (
    txn_id  INTEGER NOT NULL REFERENCES ledger_txns (txn_id),
    account TEXT NOT NULL,
    amount  INTEGER NOT NULL
);
CREATE INDEX ledger_lines_account ON ledger_lines (account, txn_id);
CREATE INDEX ledger_lines_txn ON ledger_lines (txn_id);
CREATE TABLE ledger_credits (
    ref        TEXT PRIMARY KEY,
    account    TEXT NOT NULL,
    amount     INTEGER NOT NULL,
    txn_id     INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE ledger_holds (
    channel    TEXT NOT NULL CHECK (channel IN ('task', 'query')),
    job_id     TEXT NOT NULL,
    account    TEXT NOT NULL,
    amount     INTEGER NOT NULL CHECK (amount >= 0),
    status     TEXT NOT NULL CHECK (status IN ('open', 'settled')),
    charged    INTEGER,
    refunded   INTEGER,
    outcome    TEXT,
    created_at REAL NOT NULL,
    settled_at REAL,
    PRIMARY KEY (channel, job_id),
    CHECK (status = 'open' OR (charged IS NOT NULL AND refunded IS NOT NULL
                               AND settled_at IS NOT NULL))
);
CREATE INDEX ledger_holds_open ON ledger_holds (created_at) WHERE status = 'open';
CREATE INDEX ledger_holds_settled ON ledger_holds (settled_at) WHERE status = 'settled';
CREATE INDEX ledger_holds_account ON ledger_holds (account, created_at);
CREATE TABLE ledger_settled_jobs (
    channel    TEXT NOT NULL,
    job_id     TEXT NOT NULL,
    settled_at REAL NOT NULL,
    PRIMARY KEY (channel, job_id)
) WITHOUT ROWID;
