-- The schema of a leasegate database after every migration (sqlite/migrations/ and
-- migrations.py): every table, index and trigger with the constraints it really has.
-- A fresh database is made by running the migrations, never from this file; the tests
-- check that the two agree (statement by statement, comments and spacing aside), so a
-- new migration changes this file in the same commit.
--
-- Times are wall seconds (REAL). A deadline is reached when now >= deadline. Each
-- actor owns its tables; a table's owner is named above it.
--
-- On tasks and queries, written on every transition, a set of three or more statuses is
-- spelled as comparisons, not an IN list: SQLite builds an IN list of three or more as a
-- temporary table each time a statement runs (in a CHECK, for every row written; in a
-- partial index's WHERE, for every statement that writes the table; in a trigger's
-- WHEN, for every row a statement changes). A query must spell a partial index's WHERE
-- as the index does for SQLite to use it (lanes_sql.in_flight()).


-- ---- API keys (the keys actor; the CLI uses it offline) -------------------------------

CREATE TABLE api_keys (
    key_id      TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('client', 'worker', 'admin')),
    name        TEXT NOT NULL,
    tenant      TEXT,
    sites       TEXT,
    created_at  REAL NOT NULL,
    revoked_at  REAL,
    revoked_seq INTEGER  -- revocations in commit order: what a gateway has not seen yet
);

CREATE UNIQUE INDEX api_keys_revoked_seq ON api_keys (revoked_seq)
    WHERE revoked_seq IS NOT NULL;


-- ---- Tasks (the task actor) ------------------------------------------------------------
-- A claim is valid strictly before claim_expires_at, a running lease strictly before
-- lease_expires_at; a queued task is live strictly before expires_at (its task_ttl
-- deadline) and may be leased once not_before <= now. The lease owner and token stay on
-- a finished row, so an identical retry of a result is recognised.

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
        CHECK (status = 'queued' OR status = 'leased' OR status = 'running'
               OR status = 'succeeded' OR status = 'failed' OR status = 'canceled'
               OR status = 'paused' OR status = 'stale' OR status = 'expired'),
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
    error_type       TEXT,
    error_traceback  TEXT,
    errors           TEXT,
    CHECK ((status <> 'leased' AND status <> 'running' AND status <> 'stale')
           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL)),
    CHECK (status <> 'leased' OR claim_expires_at IS NOT NULL),
    CHECK (status <> 'running' OR (lease_expires_at IS NOT NULL AND started_at IS NOT NULL)),
    CHECK (status <> 'queued' OR expires_at IS NOT NULL)
);

-- One task in flight per lane (site + account), whatever code path writes.
CREATE UNIQUE INDEX tasks_one_per_lane ON tasks (site, account)
    WHERE (status = 'leased' OR status = 'running' OR status = 'stale');
CREATE INDEX tasks_lease_owner ON tasks (lease_owner, lease_request_id)
    WHERE (status = 'leased' OR status = 'running' OR status = 'stale');
-- A lane's queued tasks in head order: the best leasable task of one lane, and the
-- head a lane's refresh seeks (INDEXED BY in the lane triggers).
CREATE INDEX tasks_lane_queue ON tasks (site, account, priority DESC, created_at)
    WHERE status = 'queued';
-- The deadlines: each on its own partial index.
CREATE INDEX tasks_not_before ON tasks (not_before) WHERE status = 'queued';
CREATE INDEX tasks_ttl ON tasks (expires_at) WHERE status = 'queued';
CREATE INDEX tasks_claim_expiry ON tasks (claim_expires_at) WHERE status = 'leased';
CREATE INDEX tasks_lease_expiry ON tasks (lease_expires_at) WHERE status = 'running';
-- Paused and stale tasks wait on people: counted (and listed) without a scan.
CREATE INDEX tasks_paused ON tasks (created_at) WHERE status = 'paused';
CREATE INDEX tasks_stale ON tasks (created_at) WHERE status = 'stale';
CREATE INDEX tasks_completed ON tasks (completed_at) WHERE completed_at IS NOT NULL;
CREATE INDEX tasks_tenant ON tasks (tenant, created_at);
CREATE INDEX tasks_created ON tasks (created_at);
-- A device's tasks, for the task actor's device-driven pause, resume and cancel.
CREATE INDEX tasks_device ON tasks (tenant, device_id, status) WHERE device_id IS NOT NULL;

-- What is left of a purged task: enough to answer a resubmit of its id (a replay or
-- 6004), never its params or result. The trigger makes the database itself refuse a
-- task under a tombstoned id, whatever code path inserts it.
CREATE TABLE task_tombstones (
    task_id     TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('succeeded', 'failed', 'canceled', 'expired')),
    purged_at   REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX task_tombstones_purged ON task_tombstones (purged_at);
CREATE TRIGGER tasks_never_reuse_a_tombstoned_id BEFORE INSERT ON tasks
    WHEN EXISTS (SELECT 1 FROM task_tombstones WHERE task_id = NEW.task_id)
BEGIN
    SELECT RAISE(IGNORE);
END;

-- A task's artifacts go with it (ON DELETE CASCADE); their files are deleted off the
-- actor's message path.
CREATE TABLE artifacts (
    task_id    TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    size       INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (task_id, name)
);

-- Worker presence; key_id is the key whose lease call last named the worker.
CREATE TABLE workers (
    worker_id     TEXT PRIMARY KEY,
    first_seen_at REAL NOT NULL,
    last_seen_at  REAL NOT NULL,
    sites         TEXT,
    key_id        TEXT,
    task_seen_at  REAL,
    query_seen_at REAL,
    query_sites   TEXT
);
CREATE INDEX workers_last_seen ON workers (last_seen_at);
CREATE INDEX workers_key ON workers (key_id, last_seen_at);


-- ---- Task lanes (the task actor; kept by triggers on tasks) -------------------------
-- One row per lane with work queued or in flight: blocked_by is its task leased, running
-- or stale; the head is its best queued task (highest priority, then oldest, then first
-- submitted). head_rank is -priority so that every index and keyset runs ascending;
-- head_seq (the head's rowid) orders tasks submitted in one instant. The lease walks
-- the free lanes in head order (task_lanes_ready*), never the queue.

CREATE TABLE task_lanes (
    site          TEXT NOT NULL,
    account       TEXT NOT NULL,
    blocked_by    TEXT,
    head_task     TEXT,
    head_rank     INTEGER,
    head_created  REAL,
    head_seq      INTEGER,
    PRIMARY KEY (site, account)
) WITHOUT ROWID;
CREATE INDEX task_lanes_ready ON task_lanes (head_rank, head_created, head_seq)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
CREATE INDEX task_lanes_ready_by_site ON task_lanes (site, head_rank, head_created, head_seq)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
-- The oldest head of a site's free lanes, in one seek (the backlog's oldest age).
CREATE INDEX task_lanes_oldest ON task_lanes (site, blocked_by, head_created, head_task)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;

-- A submit only compares itself with its lane's head.
CREATE TRIGGER task_lanes_insert_queued AFTER INSERT ON tasks
    WHEN NEW.status = 'queued'
BEGIN
    INSERT INTO task_lanes (site, account, head_task, head_rank, head_created, head_seq)
    VALUES (NEW.site, NEW.account, NEW.task_id, -NEW.priority, NEW.created_at, NEW.rowid)
    ON CONFLICT (site, account) DO UPDATE SET
        head_task = excluded.head_task, head_rank = excluded.head_rank,
        head_created = excluded.head_created, head_seq = excluded.head_seq
    WHERE head_task IS NULL OR (excluded.head_rank, excluded.head_created, excluded.head_seq)
                                < (head_rank, head_created, head_seq);
END;

-- Any other change recomputes the lane of NEW (or of OLD: a task leaving its lane, a
-- deleted task) through two index seeks, the in-flight task on tasks_one_per_lane and
-- the head on tasks_lane_queue, then drops the lane's row if it holds nothing.
CREATE TRIGGER task_lanes_insert AFTER INSERT ON tasks
    WHEN (NEW.status = 'leased' OR NEW.status = 'running' OR NEW.status = 'stale')
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT NEW.site, NEW.account,
           (SELECT task_id FROM tasks WHERE site = NEW.site AND account = NEW.account
                AND (status = 'leased' OR status = 'running' OR status = 'stale')),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = NEW.site AND account = NEW.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = NEW.site AND account = NEW.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;

CREATE TRIGGER task_lanes_update AFTER UPDATE OF status, priority, created_at, site, account
    ON tasks
    WHEN ((OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running'
           OR OLD.status = 'stale')
          OR (NEW.status = 'queued' OR NEW.status = 'leased' OR NEW.status = 'running'
              OR NEW.status = 'stale'))
        AND (OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority
             OR OLD.created_at IS NOT NEW.created_at OR OLD.site IS NOT NEW.site
             OR OLD.account IS NOT NEW.account)
        -- in flight to in flight (a start; stale): the same task blocks, the head
        -- is queued work: nothing of the lane changes
        AND NOT ((OLD.status = 'leased' OR OLD.status = 'running' OR OLD.status = 'stale')
                 AND (NEW.status = 'leased' OR NEW.status = 'running' OR NEW.status = 'stale')
                 AND OLD.site IS NEW.site AND OLD.account IS NEW.account)
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT NEW.site, NEW.account,
           (SELECT task_id FROM tasks WHERE site = NEW.site AND account = NEW.account
                AND (status = 'leased' OR status = 'running' OR status = 'stale')),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = NEW.site AND account = NEW.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = NEW.site AND account = NEW.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;

CREATE TRIGGER task_lanes_leave AFTER UPDATE OF site, account ON tasks
    WHEN (OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running'
          OR OLD.status = 'stale')
        AND (OLD.site IS NOT NEW.site OR OLD.account IS NOT NEW.account)
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT OLD.site, OLD.account,
           (SELECT task_id FROM tasks WHERE site = OLD.site AND account = OLD.account
                AND (status = 'leased' OR status = 'running' OR status = 'stale')),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = OLD.site AND account = OLD.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = OLD.site AND account = OLD.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;

CREATE TRIGGER task_lanes_delete AFTER DELETE ON tasks
    WHEN (OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running'
          OR OLD.status = 'stale')
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT OLD.site, OLD.account,
           (SELECT task_id FROM tasks WHERE site = OLD.site AND account = OLD.account
                AND (status = 'leased' OR status = 'running' OR status = 'stale')),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = OLD.site AND account = OLD.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = OLD.site AND account = OLD.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;


-- ---- Queries (the query actor) --------------------------------------------------------
-- A lease is valid strictly before lease_expires_at; a query is live strictly before
-- expires_at.

CREATE TABLE queries (
    query_id         TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    site             TEXT NOT NULL,
    kind             TEXT NOT NULL,
    params           TEXT NOT NULL,
    max_cost         INTEGER,
    fingerprint      TEXT NOT NULL,
    status           TEXT NOT NULL
        CHECK (status = 'queued' OR status = 'leased' OR status = 'succeeded'
               OR status = 'failed' OR status = 'expired'),
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
    outcome_digest   TEXT,
    error_type       TEXT,
    error_traceback  TEXT,
    max_attempts     INTEGER,
    next_attempt_at  REAL,
    available_at     REAL,
    errors           TEXT
);
-- Queued queries in submission order: all of them (queries_ready), or one site's range
-- (queries_queued: site, rowid), so that a lease reads only queued rows however many
-- finished ones are retained.
CREATE INDEX queries_ready ON queries (status) WHERE status = 'queued' AND next_attempt_at IS NULL;
CREATE INDEX queries_queued ON queries (site) WHERE status = 'queued' AND next_attempt_at IS NULL;
-- The oldest leasable query of a site in one seek; the queries waiting for a retry.
CREATE INDEX queries_leasable_since ON queries (site, status, next_attempt_at, available_at)
    WHERE status = 'queued' AND next_attempt_at IS NULL;
CREATE INDEX queries_waiting ON queries (next_attempt_at)
    WHERE status = 'queued' AND next_attempt_at IS NOT NULL;
CREATE INDEX queries_lease_expiry ON queries (lease_expires_at) WHERE status = 'leased';
CREATE INDEX queries_ttl ON queries (expires_at) WHERE status IN ('queued', 'leased');
CREATE INDEX queries_completed ON queries (completed_at) WHERE completed_at IS NOT NULL;
CREATE INDEX queries_lease_request ON queries (lease_owner, lease_request_id)
    WHERE status = 'leased';
CREATE INDEX queries_tenant ON queries (tenant, created_at);
CREATE INDEX queries_created ON queries (created_at);

-- What is left of a purged query, as for tasks.
CREATE TABLE query_tombstones (
    query_id    TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('succeeded', 'failed', 'expired')),
    purged_at   REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX query_tombstones_purged ON query_tombstones (purged_at);
CREATE TRIGGER queries_never_reuse_a_tombstoned_id BEFORE INSERT ON queries
    WHEN EXISTS (SELECT 1 FROM query_tombstones WHERE query_id = NEW.query_id)
BEGIN
    SELECT RAISE(IGNORE);
END;


-- ---- Job history (written by the queue actors with each transition) ------------------
-- event_id is one sequence for both channels, handed out in commit order without holes
-- (every write transaction is BEGIN IMMEDIATE). A job's rows go with the job: the
-- triggers delete them when its task or query row is deleted, in that transaction.

CREATE TABLE job_events (
    event_id   INTEGER PRIMARY KEY AUTOINCREMENT,
    channel    TEXT NOT NULL CHECK (channel IN ('task', 'query')),
    job_id     TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    site       TEXT NOT NULL,
    device_id  TEXT,
    kind       TEXT NOT NULL,
    status     TEXT NOT NULL,
    at         REAL NOT NULL,
    detail     TEXT NOT NULL
);
CREATE INDEX job_events_by_job ON job_events (channel, job_id, event_id);
CREATE INDEX job_events_by_time ON job_events (channel, at);
CREATE TRIGGER job_events_purge_task AFTER DELETE ON tasks BEGIN
    DELETE FROM job_events WHERE channel = 'task' AND job_id = OLD.task_id;
END;
CREATE TRIGGER job_events_purge_query AFTER DELETE ON queries BEGIN
    DELETE FROM job_events WHERE channel = 'query' AND job_id = OLD.query_id;
END;


-- ---- Ledger (the ledger actor) -------------------------------------------------------
-- Amounts are integers in minor units. Every journal transaction's lines sum to zero;
-- an account's balance is the sum of its lines, held the sum of its open holds. A hold
-- is keyed by its job; ledger_settled_jobs remembers every settled job for good, so a
-- settled job is never held or refunded again after retention deletes its hold.

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


-- ---- Devices (the device tracker) ----------------------------------------------------
-- A device is named by its tenant and its id. state is online, away or gone; version
-- counts its state changes; pending is 1 while the task actor has not confirmed the
-- action of the current state (pause, resume, cancel), so that a crash between the two
-- is repaired on restart.

CREATE TABLE devices (
    tenant        TEXT NOT NULL,
    device_id     TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('online', 'away', 'gone')),
    first_seen_at REAL NOT NULL,
    last_seen_at  REAL NOT NULL,
    changed_at    REAL NOT NULL,
    version       INTEGER NOT NULL DEFAULT 0,
    pending       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, device_id)
) WITHOUT ROWID;
CREATE INDEX devices_seen ON devices (last_seen_at);
CREATE INDEX devices_state_seen ON devices (state, last_seen_at);
CREATE INDEX devices_pending ON devices (pending) WHERE pending = 1;


-- ---- Sites (the task actor's; dispatch controls) ------------------------------------
-- Set by an operator at run time: a paused site is leased on neither channel (its work
-- still queues); leases_per_second bounds how fast its jobs are leased, on both
-- channels together: tokens as of refilled_at (wall seconds; NULL: one token at its first
-- draw) is its bucket, drawn by either queue actor's lease in its own transaction
-- (drawn_by: the channel of the last draw, which lets the other go first). A
-- site with neither control has no row. The query actor is given the controls by the
-- task actor (at start-up and on each change).

CREATE TABLE sites (
    site              TEXT PRIMARY KEY,
    paused            INTEGER NOT NULL DEFAULT 0 CHECK (paused = 0 OR paused = 1),
    reason            TEXT,
    changed_by        TEXT,
    leases_per_second REAL CHECK (leases_per_second IS NULL OR leases_per_second > 0),
    updated_at        REAL NOT NULL,
    tokens            REAL,
    refilled_at       REAL,
    drawn_by          TEXT
);


-- ---- Periodic runs (every actor's jobs and the system's) -----------------------------
-- Who claimed each periodic job's last run, and when its next one is due: among the
-- gateways of one database, one runs each due run.

CREATE TABLE periodic_runs (
    job    TEXT PRIMARY KEY,
    due_at REAL NOT NULL,
    run_by TEXT NOT NULL,
    run_at REAL NOT NULL
) WITHOUT ROWID;


-- ---- Schedules (the schedules actor's) ------------------------------------------
-- Each fire submits the job <schedule_id>@<fire time>; next_fire_at is NULL while
-- paused. A schedule's last fires: pending from their claim to their outcome.

CREATE TABLE schedules (
    schedule_id  TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    cron         TEXT NOT NULL,
    timezone     TEXT NOT NULL,
    channel      TEXT NOT NULL CHECK (channel = 'task' OR channel = 'query'),
    template     TEXT NOT NULL,
    overlap      TEXT NOT NULL CHECK (overlap = 'skip' OR overlap = 'allow'),
    catch_up     TEXT NOT NULL CHECK (catch_up = 'latest' OR catch_up = 'none'
                                      OR catch_up = 'all'),
    paused       INTEGER NOT NULL DEFAULT 0 CHECK (paused = 0 OR paused = 1),
    next_fire_at REAL,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL
);
CREATE INDEX schedules_tenant ON schedules (tenant, created_at);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;
CREATE TABLE schedule_fires (
    schedule_id TEXT NOT NULL,
    fire_at     REAL NOT NULL,
    job_id      TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status = 'pending' OR status = 'submitted'
                                     OR status = 'skipped' OR status = 'failed'),
    error       TEXT,
    claimed_at  REAL NOT NULL,
    PRIMARY KEY (schedule_id, fire_at)
);
CREATE INDEX schedule_fires_pending ON schedule_fires (claimed_at) WHERE status = 'pending';


-- ---- Webhooks (the webhooks actor's; deliveries written by the queues) ----------
-- An endpoint is a tenant's URL and the job events it listens to; a delivery is one
-- event for one endpoint, written by the task or query actor in the transaction of the
-- job's terminal transition (the outbox), then sent and recorded by the webhooks actor.

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


PRAGMA user_version = 25;
