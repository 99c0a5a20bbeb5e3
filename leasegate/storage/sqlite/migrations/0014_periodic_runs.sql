-- Migration 14: periodic jobs run once among the gateways of one database, not once per
-- gateway. A gateway claims a job's due run by moving its due_at past now (an upsert
-- conditional on due_at <= now): the one whose upsert changed the row runs it; the
-- others see who did. On SQLite (one gateway) the claim always succeeds.

CREATE TABLE periodic_runs (
    job    TEXT PRIMARY KEY,  -- '<owner>.<name>', e.g. 'tasks.purge'
    due_at REAL NOT NULL,     -- when the next run is due (wall seconds)
    run_by TEXT NOT NULL,     -- the gateway that claimed the last run
    run_at REAL NOT NULL      -- when it claimed it
) WITHOUT ROWID;
