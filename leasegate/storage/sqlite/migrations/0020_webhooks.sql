-- Migration 20: completion webhooks. An endpoint is a tenant's URL and the job events it
-- listens to; a delivery is one event for one endpoint, written by the task or query
-- actor in the same transaction as the job's terminal transition (the outbox), and then
-- sent, retried and recorded by the webhooks actor.

CREATE TABLE webhook_endpoints (
    endpoint_id      TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    url              TEXT NOT NULL,
    events           TEXT NOT NULL,              -- a JSON list of event types
    description      TEXT NOT NULL DEFAULT '',
    secret           TEXT NOT NULL,              -- whsec_...
    old_secret       TEXT,                       -- signs beside it until old_secret_until
    old_secret_until REAL,
    disabled         INTEGER NOT NULL DEFAULT 0 CHECK (disabled = 0 OR disabled = 1),
    disabled_reason  TEXT,
    failing_since    REAL,                       -- the first of an unbroken run of failures
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant, created_at);

CREATE TABLE webhook_deliveries (
    seq              INTEGER PRIMARY KEY,  -- in the order written
    delivery_id      TEXT NOT NULL UNIQUE,       -- the webhook-id header
    endpoint_id      TEXT NOT NULL,
    tenant           TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    channel          TEXT NOT NULL CHECK (channel = 'task' OR channel = 'query'),
    job_id           TEXT NOT NULL,
    status           TEXT NOT NULL
        CHECK (status = 'pending' OR status = 'delivered' OR status = 'failed'),
    attempts         INTEGER NOT NULL DEFAULT 0,
    body             TEXT,                       -- the JSON sent, fixed at the first attempt
    last_status_code INTEGER,
    last_error       TEXT,
    last_response    TEXT,                       -- at most 1 KB of the last answer
    next_attempt_at  REAL,                       -- pending only
    lease_owner      TEXT,                       -- the gateway sending it now
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, seq);
