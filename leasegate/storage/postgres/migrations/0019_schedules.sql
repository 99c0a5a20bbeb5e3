-- Recurring schedules (the schedules actor's): each fire submits a job whose id is
-- <schedule_id>@<fire time>, so a fire happens once whoever makes it. next_fire_at
-- (wall seconds) is the next cron time, NULL while paused. A schedule's fires: its
-- last ones, pending from their claim until their submit's outcome is recorded.
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
