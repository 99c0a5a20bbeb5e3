-- Dispatch controls per site, set by an operator at run time: a paused site is leased
-- on neither channel (its work still queues); leases_per_second bounds how fast its
-- jobs are leased. A site with neither control has no row. Owned by the task actor.
CREATE TABLE sites (
    site              text PRIMARY KEY,
    paused            integer NOT NULL DEFAULT 0 CHECK (paused = 0 OR paused = 1),
    reason            text,
    changed_by        text,
    leases_per_second double precision
        CHECK (leases_per_second IS NULL OR leases_per_second > 0),
    updated_at        double precision NOT NULL
);
