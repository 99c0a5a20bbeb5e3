CREATE TABLE queries (
    query_id         TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    site             TEXT NOT NULL,
    kind             TEXT NOT NULL,
    params           TEXT NOT NULL,
    max_cost         INTEGER,
    fingerprint      TEXT NOT NULL,
    status           TEXT NOT NULL
        CHECK (status IN ('queued', 'leased', 'succeeded', 'failed', 'expired')),
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_request_id TEXT,
    lease_expires_at REAL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL,
    expires_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    completed_at     REAL,
    result           TEXT,
    error_code       INTEGER,
    error_message    TEXT,
    cost             INTEGER,
    outcome_digest   TEXT
);
CREATE INDEX queries_queued ON queries (site) WHERE status = 'queued';
CREATE INDEX queries_lease_expiry ON queries (lease_expires_at) WHERE status = 'leased';
CREATE INDEX queries_ttl ON queries (expires_at) WHERE status IN ('queued', 'leased');
CREATE INDEX queries_completed ON queries (completed_at) WHERE completed_at IS NOT NULL;
CREATE INDEX queries_lease_request ON queries (lease_owner, lease_request_id)
    WHERE status = 'leased';
CREATE INDEX queries_tenant ON queries (tenant, created_at);
