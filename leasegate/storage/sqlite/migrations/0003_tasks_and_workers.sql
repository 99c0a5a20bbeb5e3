CREATE TABLE tasks (
    task_id          TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    site             TEXT NOT NULL,
    account          TEXT NOT NULL,
    kind             TEXT NOT NULL,
    params           TEXT NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    not_before       REAL,
    device_id        TEXT,
    batch_total      INTEGER,
    max_cost         INTEGER,
    fingerprint      TEXT NOT NULL,
    status           TEXT NOT NULL
        CHECK (status IN ('queued', 'leased', 'running', 'succeeded', 'failed', 'canceled',
                          'paused', 'stale', 'expired')),
    progress         TEXT,
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_request_id TEXT,
    claim_expires_at REAL,
    lease_expires_at REAL,
    renewed_at       REAL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    pause_requested  INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL,
    expires_at       REAL,
    updated_at       REAL NOT NULL,
    started_at       REAL,
    completed_at     REAL,
    result           TEXT,
    error_code       INTEGER,
    error_message    TEXT,
    cost             INTEGER,
    outcome_digest   TEXT,
    late_result      INTEGER NOT NULL DEFAULT 0,
    stale_reason     TEXT,
    stale_at         REAL,
    reclaim_action   TEXT,
    reclaim_reason   TEXT,
    reclaim_by       TEXT,
    reclaim_at       REAL,
    CHECK (status NOT IN ('leased', 'running', 'stale')
           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL)),
    CHECK (status <> 'leased' OR claim_expires_at IS NOT NULL),
    CHECK (status <> 'running' OR (lease_expires_at IS NOT NULL AND started_at IS NOT NULL)),
    CHECK (status <> 'queued' OR expires_at IS NOT NULL)
);
CREATE UNIQUE INDEX tasks_one_per_lane ON tasks (site, account)
    WHERE status IN ('leased', 'running', 'stale');
CREATE INDEX tasks_queued ON tasks (priority DESC, created_at) WHERE status = 'queued';
CREATE INDEX tasks_not_before ON tasks (not_before) WHERE status = 'queued';
CREATE INDEX tasks_ttl ON tasks (expires_at) WHERE status = 'queued';
CREATE INDEX tasks_claim_expiry ON tasks (claim_expires_at) WHERE status = 'leased';
CREATE INDEX tasks_lease_expiry ON tasks (lease_expires_at) WHERE status = 'running';
CREATE INDEX tasks_lease_owner ON tasks (lease_owner, lease_request_id)
    WHERE status IN ('leased', 'running', 'stale');
CREATE INDEX tasks_completed ON tasks (completed_at) WHERE completed_at IS NOT NULL;
CREATE INDEX tasks_tenant ON tasks (tenant, created_at);
CREATE TABLE workers (
    worker_id     TEXT PRIMARY KEY,
    first_seen_at REAL NOT NULL,
    last_seen_at  REAL NOT NULL,
    sites         TEXT
);
CREATE INDEX workers_last_seen ON workers (last_seen_at);
