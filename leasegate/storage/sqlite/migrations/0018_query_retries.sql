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
CREATE INDEX queries_leasable_since ON queries (site, available_at)
    WHERE status = 'queued' AND next_attempt_at IS NULL;
CREATE INDEX queries_waiting ON queries (next_attempt_at)
    WHERE status = 'queued' AND next_attempt_at IS NOT NULL;
-- The oldest head of a site's free lanes, in one seek (the backlog's oldest age).
CREATE INDEX task_lanes_oldest ON task_lanes (site, head_created)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
