-- Query retries: a failed (or snoozed) query waits in 'queued' until next_attempt_at;
-- a lease takes only queries whose next_attempt_at is NULL (the actors' timers clear it
-- when it comes). available_at: since when a queued query could be leased (its
-- submit, requeue or the end of its wait), for the backlog's oldest age. max_attempts:
-- the submit's (NULL: the query_max_attempts setting). errors: the last attempts'
-- errors, as JSON, on both channels (a task's survive its operator retries).
ALTER TABLE queries ADD COLUMN max_attempts INTEGER;
ALTER TABLE queries ADD COLUMN next_attempt_at REAL;
ALTER TABLE queries ADD COLUMN available_at REAL;
ALTER TABLE queries ADD COLUMN errors TEXT;
ALTER TABLE tasks ADD COLUMN errors TEXT;
UPDATE queries SET available_at = created_at WHERE status = 'queued';
DROP INDEX queries_ready;
DROP INDEX queries_queued;
CREATE INDEX queries_ready ON queries (status) WHERE status = 'queued' AND next_attempt_at IS NULL;
CREATE INDEX queries_queued ON queries (site) WHERE status = 'queued' AND next_attempt_at IS NULL;
-- A site's leasable queries, oldest first (the backlog: depth and age, the index alone).
CREATE INDEX queries_leasable_since ON queries (site, status, next_attempt_at, available_at)
    WHERE status = 'queued' AND next_attempt_at IS NULL;
CREATE INDEX queries_waiting ON queries (next_attempt_at)
    WHERE status = 'queued' AND next_attempt_at IS NOT NULL;
-- A site's free lanes, oldest head first: the backlog's depth (an index-only count) and
-- oldest age (one seek). Each index names the columns of its WHERE, so that SQLite reads
-- it alone (it does not take a partial index's condition as covered).
CREATE INDEX task_lanes_oldest ON task_lanes (site, blocked_by, head_created, head_task)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
