-- Recurring schedules (the schedules actor's): each fire submits a job whose id is
-- <schedule_id>@<fire time>, so a fire happens once whoever makes it. next_fire_at
-- (wall seconds) is the next cron time, NULL while paused. A schedule's fires: its
-- last ones, pending from their claim until their submit's outcome is recorded.
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
