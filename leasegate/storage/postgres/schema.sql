-- The schema of a leasegate database on PostgreSQL after every migration
-- (postgres/migrations/ and postgres/migrations.py): the tables, columns, constraints and
-- indexes of SQLite's (sqlite/schema.sql), in PostgreSQL's types. A fresh database is
-- made by running the migrations, never from this file; the tests check that the two
-- agree (the catalog of each, compared), so a new migration changes this file in the
-- same commit.
--
-- Types: instants are double precision (wall seconds, as SQLite's REAL); every other
-- integer is bigint (SQLite's INTEGER is 64 bits: no value SQLite takes is refused),
-- except the 0/1 flags, smallint, so that the statements both engines run (`pending =
-- 1`, `pause_requested = 0`) are the same text; strings are text.
--
-- SQLite gives a table a rowid the SQL may read. Where ours does (an order of
-- insertion: a lane's head among tasks submitted in one instant, queued queries, pages
-- of keys, accounts, holds and journal lines), the table has a real column named rowid,
-- numbered by an identity; it comes last in SELECT *. An index SQLite walks in rowid
-- order (it ends every index with the rowid) names the column at its end.
-- INTEGER PRIMARY KEY AUTOINCREMENT is an identity (never reused). WITHOUT ROWID
-- tables are plain tables.
--
-- Triggers are PL/pgSQL functions, one per trigger; a WHEN is the same test as
-- SQLite's (`IS` spelled IS NOT DISTINCT FROM, IS NOT spelled IS DISTINCT FROM).


-- ---- Schema version (the migration runner's bookkeeping; made by the runner) -------

CREATE TABLE schema_version (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamp with time zone NOT NULL DEFAULT now()
);


-- ---- API keys (the keys actor; the CLI uses it offline) -------------------------------

CREATE TABLE api_keys (
    key_id      text PRIMARY KEY,
    secret_hash text NOT NULL,
    role        text NOT NULL CHECK (role IN ('client', 'worker', 'admin')),
    name        text NOT NULL,
    tenant      text,
    sites       text,
    created_at  double precision NOT NULL,
    revoked_at  double precision,
    rowid       bigint GENERATED ALWAYS AS IDENTITY,
    revoked_seq bigint  -- revocations in commit order (sqlite/schema.sql)
);

CREATE UNIQUE INDEX api_keys_revoked_seq ON api_keys (revoked_seq)
    WHERE revoked_seq IS NOT NULL;


-- ---- Tasks (the task actor) ------------------------------------------------------------

CREATE TABLE tasks (
    task_id          text PRIMARY KEY,
    tenant           text NOT NULL,
    site             text NOT NULL,
    account          text NOT NULL,
    kind             text NOT NULL,
    params           text NOT NULL,
    priority         bigint NOT NULL DEFAULT 0,
    not_before       double precision,
    device_id        text,
    batch_total      bigint,
    max_cost         bigint,
    fingerprint      text NOT NULL,
    status           text NOT NULL
        CHECK (status = 'queued' OR status = 'leased' OR status = 'running'
               OR status = 'succeeded' OR status = 'failed' OR status = 'canceled'
               OR status = 'paused' OR status = 'stale' OR status = 'expired'),
    progress         text,
    lease_owner      text,
    lease_token      text,
    lease_request_id text,
    claim_expires_at double precision,
    lease_expires_at double precision,
    renewed_at       double precision,
    attempts         bigint NOT NULL DEFAULT 0,
    cancel_requested smallint NOT NULL DEFAULT 0,
    pause_requested  smallint NOT NULL DEFAULT 0,
    created_at       double precision NOT NULL,
    expires_at       double precision,
    updated_at       double precision NOT NULL,
    started_at       double precision,
    completed_at     double precision,
    result           text,
    error_code       bigint,
    error_message    text,
    cost             bigint,
    outcome_digest   text,
    late_result      smallint NOT NULL DEFAULT 0,
    stale_reason     text,
    stale_at         double precision,
    reclaim_action   text,
    reclaim_reason   text,
    reclaim_by       text,
    reclaim_at       double precision,
    rowid            bigint GENERATED ALWAYS AS IDENTITY,
    error_type       text,
    error_traceback  text,
    errors           text,
    CHECK ((status <> 'leased' AND status <> 'running' AND status <> 'stale')
           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL)),
    CHECK (status <> 'leased' OR claim_expires_at IS NOT NULL),
    CHECK (status <> 'running' OR (lease_expires_at IS NOT NULL AND started_at IS NOT NULL)),
    CHECK (status <> 'queued' OR expires_at IS NOT NULL)
);

-- One task in flight per lane (site + account), whatever code path or gateway writes.
CREATE UNIQUE INDEX tasks_one_per_lane ON tasks (site, account)
    WHERE (status = 'leased' OR status = 'running' OR status = 'stale');
CREATE INDEX tasks_lease_owner ON tasks (lease_owner, lease_request_id)
    WHERE (status = 'leased' OR status = 'running' OR status = 'stale');
CREATE INDEX tasks_lane_queue ON tasks (site, account, priority DESC, created_at, rowid)
    WHERE status = 'queued';
CREATE INDEX tasks_not_before ON tasks (not_before) WHERE status = 'queued';
CREATE INDEX tasks_ttl ON tasks (expires_at) WHERE status = 'queued';
CREATE INDEX tasks_claim_expiry ON tasks (claim_expires_at) WHERE status = 'leased';
CREATE INDEX tasks_lease_expiry ON tasks (lease_expires_at) WHERE status = 'running';
CREATE INDEX tasks_paused ON tasks (created_at) WHERE status = 'paused';
CREATE INDEX tasks_stale ON tasks (created_at) WHERE status = 'stale';
CREATE INDEX tasks_completed ON tasks (completed_at) WHERE completed_at IS NOT NULL;
CREATE INDEX tasks_tenant ON tasks (tenant, created_at);
CREATE INDEX tasks_created ON tasks (created_at, rowid);
CREATE INDEX tasks_device ON tasks (tenant, device_id, status) WHERE device_id IS NOT NULL;

-- What is left of a purged task; the trigger makes the database refuse (skip) a task
-- under a tombstoned id.
CREATE TABLE task_tombstones (
    task_id     text PRIMARY KEY,
    tenant      text NOT NULL,
    fingerprint text NOT NULL,
    status      text NOT NULL CHECK (status IN ('succeeded', 'failed', 'canceled', 'expired')),
    purged_at   double precision NOT NULL
);
CREATE INDEX task_tombstones_purged ON task_tombstones (purged_at);
CREATE FUNCTION tasks_never_reuse_a_tombstoned_id() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM task_tombstones WHERE task_id = NEW.task_id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER tasks_never_reuse_a_tombstoned_id BEFORE INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION tasks_never_reuse_a_tombstoned_id();

CREATE TABLE artifacts (
    task_id    text NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    name       text NOT NULL,
    size       bigint NOT NULL,
    sha256     text NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (task_id, name)
);

CREATE TABLE workers (
    worker_id     text PRIMARY KEY,
    first_seen_at double precision NOT NULL,
    last_seen_at  double precision NOT NULL,
    sites         text,
    key_id        text,
    task_seen_at  double precision,
    query_seen_at double precision,
    query_sites   text
);
CREATE INDEX workers_last_seen ON workers (last_seen_at);
CREATE INDEX workers_key ON workers (key_id, last_seen_at);


-- ---- Task lanes (the task actor; kept by triggers on tasks) -------------------------
-- As on SQLite: one row per lane with work queued or in flight, its blocker and its
-- head. Several gateways may change one lane at once, so every change of a lane takes
-- the lane's row lock first (task_lanes_lock; the row is made if the lane has none) and
-- holds it to commit: changes of one lane take turns, and each reads the lane's tasks
-- as the one before left them. Lock order: a task's row (the statement's), then its
-- lane's row (the trigger's); never the other way round.

CREATE TABLE task_lanes (
    site          text NOT NULL,
    account       text NOT NULL,
    blocked_by    text,
    head_task     text,
    head_rank     bigint,
    head_created  double precision,
    head_seq      bigint,
    PRIMARY KEY (site, account)
);
CREATE INDEX task_lanes_ready ON task_lanes (head_rank, head_created, head_seq)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
CREATE INDEX task_lanes_ready_by_site ON task_lanes (site, head_rank, head_created, head_seq)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
-- The oldest head of a site's free lanes, in one seek (the backlog's oldest age).
CREATE INDEX task_lanes_oldest ON task_lanes (site, blocked_by, head_created, head_task)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;

CREATE FUNCTION task_lanes_lock(lane_site text, lane_account text) RETURNS task_lanes
LANGUAGE plpgsql AS $$
DECLARE
    lane task_lanes;
BEGIN
    LOOP
        SELECT * INTO lane FROM task_lanes
            WHERE site = lane_site AND account = lane_account FOR UPDATE;
        IF FOUND THEN
            RETURN lane;
        END IF;
        INSERT INTO task_lanes (site, account) VALUES (lane_site, lane_account)
            ON CONFLICT DO NOTHING RETURNING * INTO lane;
        IF FOUND THEN
            RETURN lane;
        END IF;
    END LOOP;
END $$;

-- The lane's row from its tasks (each statement reads what is committed once the lock
-- is held): the in-flight task on tasks_one_per_lane, the head on tasks_lane_queue;
-- dropped if the lane holds nothing.
CREATE FUNCTION task_lanes_refresh(lane_site text, lane_account text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    blocker text;
    head_id text;
    head_priority bigint;
    head_at double precision;
    head_row bigint;
BEGIN
    PERFORM task_lanes_lock(lane_site, lane_account);
    SELECT task_id INTO blocker FROM tasks
        WHERE site = lane_site AND account = lane_account
          AND (status = 'leased' OR status = 'running' OR status = 'stale');
    SELECT task_id, priority, created_at, rowid
        INTO head_id, head_priority, head_at, head_row FROM tasks
        WHERE site = lane_site AND account = lane_account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1;
    IF blocker IS NULL AND head_id IS NULL THEN
        DELETE FROM task_lanes WHERE site = lane_site AND account = lane_account;
    ELSE
        UPDATE task_lanes SET blocked_by = blocker, head_task = head_id,
                              head_rank = -head_priority, head_created = head_at,
                              head_seq = head_row
            WHERE site = lane_site AND account = lane_account;
    END IF;
END $$;

-- A submit only compares itself with its lane's head (ON CONFLICT locks the lane's row
-- and compares with its latest version).
CREATE FUNCTION task_lanes_insert_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_lanes AS lane (site, account, head_task, head_rank, head_created,
                                    head_seq)
    VALUES (NEW.site, NEW.account, NEW.task_id, -NEW.priority, NEW.created_at, NEW.rowid)
    ON CONFLICT (site, account) DO UPDATE SET
        head_task = excluded.head_task, head_rank = excluded.head_rank,
        head_created = excluded.head_created, head_seq = excluded.head_seq
    WHERE lane.head_task IS NULL
       OR (excluded.head_rank, excluded.head_created, excluded.head_seq)
          < (lane.head_rank, lane.head_created, lane.head_seq);
    RETURN NULL;
END $$;
CREATE TRIGGER task_lanes_insert_queued AFTER INSERT ON tasks
    FOR EACH ROW WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION task_lanes_insert_queued();

-- A task enters flight only in a free lane. Two gateways leasing two tasks of one lane
-- take turns on the lane's row; the second finds the lane blocked and leaves its task
-- as it was (its UPDATE changes no row, as a conditional update whose condition no
-- longer holds), instead of breaking tasks_one_per_lane. SQLite's one writer never
-- tries.
CREATE FUNCTION task_lanes_enter_flight() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    lane task_lanes;
BEGIN
    lane := task_lanes_lock(NEW.site, NEW.account);
    IF lane.blocked_by IS NOT NULL AND lane.blocked_by <> NEW.task_id THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER task_lanes_enter_flight BEFORE UPDATE OF status, site, account ON tasks
    FOR EACH ROW
    WHEN ((NEW.status = 'leased' OR NEW.status = 'running' OR NEW.status = 'stale')
          AND NOT ((OLD.status = 'leased' OR OLD.status = 'running' OR OLD.status = 'stale')
                   AND OLD.site IS NOT DISTINCT FROM NEW.site
                   AND OLD.account IS NOT DISTINCT FROM NEW.account))
    EXECUTE FUNCTION task_lanes_enter_flight();

-- Any other change recomputes the lane of NEW (or of OLD: a task leaving its lane, a
-- deleted task).
CREATE FUNCTION task_lanes_refresh_new() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM task_lanes_refresh(NEW.site, NEW.account);
    RETURN NULL;
END $$;
CREATE FUNCTION task_lanes_refresh_old() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM task_lanes_refresh(OLD.site, OLD.account);
    RETURN NULL;
END $$;

CREATE TRIGGER task_lanes_insert AFTER INSERT ON tasks
    FOR EACH ROW
    WHEN (NEW.status = 'leased' OR NEW.status = 'running' OR NEW.status = 'stale')
    EXECUTE FUNCTION task_lanes_refresh_new();

CREATE TRIGGER task_lanes_update AFTER UPDATE OF status, priority, created_at, site, account
    ON tasks FOR EACH ROW
    WHEN (((OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running'
            OR OLD.status = 'stale')
           OR (NEW.status = 'queued' OR NEW.status = 'leased' OR NEW.status = 'running'
               OR NEW.status = 'stale'))
          AND (OLD.status IS DISTINCT FROM NEW.status
               OR OLD.priority IS DISTINCT FROM NEW.priority
               OR OLD.created_at IS DISTINCT FROM NEW.created_at
               OR OLD.site IS DISTINCT FROM NEW.site
               OR OLD.account IS DISTINCT FROM NEW.account)
          -- in flight to in flight (a start; stale): nothing of the lane changes
          AND NOT ((OLD.status = 'leased' OR OLD.status = 'running' OR OLD.status = 'stale')
                   AND (NEW.status = 'leased' OR NEW.status = 'running'
                        OR NEW.status = 'stale')
                   AND OLD.site IS NOT DISTINCT FROM NEW.site
                   AND OLD.account IS NOT DISTINCT FROM NEW.account))
    EXECUTE FUNCTION task_lanes_refresh_new();

CREATE TRIGGER task_lanes_leave AFTER UPDATE OF site, account ON tasks
    FOR EACH ROW
    WHEN ((OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running'
           OR OLD.status = 'stale')
          AND (OLD.site IS DISTINCT FROM NEW.site OR OLD.account IS DISTINCT FROM NEW.account))
    EXECUTE FUNCTION task_lanes_refresh_old();

CREATE TRIGGER task_lanes_delete AFTER DELETE ON tasks
    FOR EACH ROW
    WHEN (OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running'
          OR OLD.status = 'stale')
    EXECUTE FUNCTION task_lanes_refresh_old();


-- ---- Queries (the query actor) --------------------------------------------------------

CREATE TABLE queries (
    query_id         text PRIMARY KEY,
    tenant           text NOT NULL,
    site             text NOT NULL,
    kind             text NOT NULL,
    params           text NOT NULL,
    max_cost         bigint,
    fingerprint      text NOT NULL,
    status           text NOT NULL
        CHECK (status = 'queued' OR status = 'leased' OR status = 'succeeded'
               OR status = 'failed' OR status = 'expired'),
    lease_owner      text,
    lease_token      text,
    lease_request_id text,
    lease_expires_at double precision,
    attempts         bigint NOT NULL DEFAULT 0,
    created_at       double precision NOT NULL,
    expires_at       double precision NOT NULL,
    updated_at       double precision NOT NULL,
    completed_at     double precision,
    result           text,
    error_code       bigint,
    error_message    text,
    cost             bigint,
    outcome_digest   text,
    rowid            bigint GENERATED ALWAYS AS IDENTITY,
    error_type       text,
    error_traceback  text,
    max_attempts     bigint,
    next_attempt_at  double precision,
    available_at     double precision,
    errors           text
);
-- Queued queries in submission order: all of them, or one site's range.
CREATE INDEX queries_ready ON queries (status, rowid) WHERE status = 'queued' AND next_attempt_at IS NULL;
CREATE INDEX queries_queued ON queries (site, rowid) WHERE status = 'queued' AND next_attempt_at IS NULL;
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
CREATE INDEX queries_created ON queries (created_at, rowid);

CREATE TABLE query_tombstones (
    query_id    text PRIMARY KEY,
    tenant      text NOT NULL,
    fingerprint text NOT NULL,
    status      text NOT NULL CHECK (status IN ('succeeded', 'failed', 'expired')),
    purged_at   double precision NOT NULL
);
CREATE INDEX query_tombstones_purged ON query_tombstones (purged_at);
CREATE FUNCTION queries_never_reuse_a_tombstoned_id() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM query_tombstones WHERE query_id = NEW.query_id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER queries_never_reuse_a_tombstoned_id BEFORE INSERT ON queries
    FOR EACH ROW EXECUTE FUNCTION queries_never_reuse_a_tombstoned_id();


-- ---- Job history (written by the queue actors with each transition) ------------------
-- event_id comes from an identity: unique and never reused, but handed out when a row
-- is inserted, not when it commits (gateways commit in another order) and not given
-- back by a rollback.

CREATE TABLE job_events (
    event_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel    text NOT NULL CHECK (channel IN ('task', 'query')),
    job_id     text NOT NULL,
    tenant     text NOT NULL,
    site       text NOT NULL,
    device_id  text,
    kind       text NOT NULL,
    status     text NOT NULL,
    at         double precision NOT NULL,
    detail     text NOT NULL
);
CREATE INDEX job_events_by_job ON job_events (channel, job_id, event_id);
CREATE INDEX job_events_by_time ON job_events (channel, at);
CREATE FUNCTION job_events_purge_task() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_events WHERE channel = 'task' AND job_id = OLD.task_id;
    RETURN NULL;
END $$;
CREATE TRIGGER job_events_purge_task AFTER DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION job_events_purge_task();
CREATE FUNCTION job_events_purge_query() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_events WHERE channel = 'query' AND job_id = OLD.query_id;
    RETURN NULL;
END $$;
CREATE TRIGGER job_events_purge_query AFTER DELETE ON queries
    FOR EACH ROW EXECUTE FUNCTION job_events_purge_query();


-- ---- Ledger (the ledger actor) -------------------------------------------------------

CREATE TABLE ledger_accounts (
    account    text PRIMARY KEY,
    balance    bigint NOT NULL DEFAULT 0,
    held       bigint NOT NULL DEFAULT 0,
    created_at double precision NOT NULL,
    rowid      bigint GENERATED ALWAYS AS IDENTITY
);
CREATE TABLE ledger_txns (
    txn_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('credit', 'hold', 'charge', 'refund')),
    ref        text NOT NULL,
    memo       text,
    created_at double precision NOT NULL
);
CREATE TABLE ledger_lines (
    txn_id  bigint NOT NULL REFERENCES ledger_txns (txn_id),
    account text NOT NULL,
    amount  bigint NOT NULL,
    rowid   bigint GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX ledger_lines_account ON ledger_lines (account, txn_id);
CREATE INDEX ledger_lines_txn ON ledger_lines (txn_id);
CREATE TABLE ledger_credits (
    ref        text PRIMARY KEY,
    account    text NOT NULL,
    amount     bigint NOT NULL,
    txn_id     bigint NOT NULL,
    created_at double precision NOT NULL
);
CREATE TABLE ledger_holds (
    channel    text NOT NULL CHECK (channel IN ('task', 'query')),
    job_id     text NOT NULL,
    account    text NOT NULL,
    amount     bigint NOT NULL CHECK (amount >= 0),
    status     text NOT NULL CHECK (status IN ('open', 'settled')),
    charged    bigint,
    refunded   bigint,
    outcome    text,
    created_at double precision NOT NULL,
    settled_at double precision,
    rowid      bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (channel, job_id),
    CHECK (status = 'open' OR (charged IS NOT NULL AND refunded IS NOT NULL
                               AND settled_at IS NOT NULL))
);
CREATE INDEX ledger_holds_open ON ledger_holds (created_at) WHERE status = 'open';
CREATE INDEX ledger_holds_settled ON ledger_holds (settled_at) WHERE status = 'settled';
CREATE INDEX ledger_holds_account ON ledger_holds (account, created_at);
CREATE TABLE ledger_settled_jobs (
    channel    text NOT NULL,
    job_id     text NOT NULL,
    settled_at double precision NOT NULL,
    PRIMARY KEY (channel, job_id)
);


-- ---- Devices (the device tracker) ----------------------------------------------------

CREATE TABLE devices (
    tenant        text NOT NULL,
    device_id     text NOT NULL,
    state         text NOT NULL CHECK (state IN ('online', 'away', 'gone')),
    first_seen_at double precision NOT NULL,
    last_seen_at  double precision NOT NULL,
    changed_at    double precision NOT NULL,
    version       bigint NOT NULL DEFAULT 0,
    pending       smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, device_id)
);
CREATE INDEX devices_seen ON devices (last_seen_at);
CREATE INDEX devices_state_seen ON devices (state, last_seen_at);
CREATE INDEX devices_pending ON devices (pending) WHERE pending = 1;


-- ---- Sites (the task actor's; dispatch controls) ------------------------------------

CREATE TABLE sites (
    site              text PRIMARY KEY,
    paused            integer NOT NULL DEFAULT 0 CHECK (paused = 0 OR paused = 1),
    reason            text,
    changed_by        text,
    leases_per_second double precision
        CHECK (leases_per_second IS NULL OR leases_per_second > 0),
    updated_at        double precision NOT NULL,
    tokens            double precision,  -- the bucket both channels draw (sqlite/schema.sql)
    refilled_at       double precision,
    drawn_by          text
);


-- ---- Periodic runs (every actor's jobs and the system's) -----------------------------

CREATE TABLE periodic_runs (
    job    text PRIMARY KEY,
    due_at double precision NOT NULL,
    run_by text NOT NULL,
    run_at double precision NOT NULL
);


-- ---- Schedules (the schedules actor's) ------------------------------------------
-- Each fire submits the job <schedule_id>@<fire time>; next_fire_at is NULL while
-- paused. A schedule's last fires: pending from their claim to their outcome.

CREATE TABLE schedules (
    schedule_id  text PRIMARY KEY,
    tenant       text NOT NULL,
    cron         text NOT NULL,
    timezone     text NOT NULL,
    channel      text NOT NULL CHECK (channel = 'task' OR channel = 'query'),
    template     text NOT NULL,
    overlap      text NOT NULL CHECK (overlap = 'skip' OR overlap = 'allow'),
    catch_up     text NOT NULL CHECK (catch_up = 'latest' OR catch_up = 'none'
                                      OR catch_up = 'all'),
    paused       integer NOT NULL DEFAULT 0 CHECK (paused = 0 OR paused = 1),
    next_fire_at double precision,
    created_at   double precision NOT NULL,
    updated_at   double precision NOT NULL
);
CREATE INDEX schedules_tenant ON schedules (tenant, created_at);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;
CREATE TABLE schedule_fires (
    schedule_id text NOT NULL,
    fire_at     double precision NOT NULL,
    job_id      text NOT NULL,
    status      text NOT NULL CHECK (status = 'pending' OR status = 'submitted'
                                     OR status = 'skipped' OR status = 'failed'),
    error       text,
    claimed_at  double precision NOT NULL,
    PRIMARY KEY (schedule_id, fire_at)
);
CREATE INDEX schedule_fires_pending ON schedule_fires (claimed_at) WHERE status = 'pending';


-- ---- Webhooks (sqlite/schema.sql) ----------------------------------------------------

CREATE TABLE webhook_endpoints (
    endpoint_id      text PRIMARY KEY,
    tenant           text NOT NULL,
    url              text NOT NULL,
    events           text NOT NULL,              -- a JSON list of event types
    description      text NOT NULL DEFAULT '',
    secret           text NOT NULL,              -- whsec_...
    old_secret       text,                       -- signs beside it until old_secret_until
    old_secret_until double precision,
    disabled         integer NOT NULL DEFAULT 0 CHECK (disabled = 0 OR disabled = 1),
    disabled_reason  text,
    failing_since    double precision,           -- the first of an unbroken run of failures
    created_at       double precision NOT NULL,
    updated_at       double precision NOT NULL
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant, created_at);

CREATE TABLE webhook_deliveries (
    seq              bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,  -- in the order written
    delivery_id      text NOT NULL UNIQUE,       -- the webhook-id header
    endpoint_id      text NOT NULL,
    tenant           text NOT NULL,
    event_type       text NOT NULL,
    channel          text NOT NULL CHECK (channel = 'task' OR channel = 'query'),
    job_id           text NOT NULL,
    status           text NOT NULL
        CHECK (status = 'pending' OR status = 'delivered' OR status = 'failed'),
    attempts         integer NOT NULL DEFAULT 0,
    body             text,                       -- the JSON sent, fixed at the first attempt
    last_status_code integer,
    last_error       text,
    last_response    text,                       -- at most 1 KB of the last answer
    next_attempt_at  double precision,                       -- pending only
    lease_owner      text,                       -- the gateway sending it now
    created_at       double precision NOT NULL,
    updated_at       double precision NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, seq);


INSERT INTO schema_version (version, name) VALUES (12, 'baseline');
INSERT INTO schema_version (version, name) VALUES (13, 'sites');
INSERT INTO schema_version (version, name) VALUES (14, 'periodic runs');
INSERT INTO schema_version (version, name) VALUES (15, 'job errors and search');
INSERT INTO schema_version (version, name) VALUES (16, 'site tokens');
INSERT INTO schema_version (version, name) VALUES (18, 'query retries');
INSERT INTO schema_version (version, name) VALUES (19, 'schedules');
INSERT INTO schema_version (version, name) VALUES (20, 'webhooks');
INSERT INTO schema_version (version, name) VALUES (22, 'key revocation order');
INSERT INTO schema_version (version, name) VALUES (24, 'worker channels');
INSERT INTO schema_version (version, name) VALUES (25, 'job events by time');
