-- A worker's error as it was raised: the exception's type and a bounded traceback,
-- beside the code and message a job has always had.
ALTER TABLE tasks ADD COLUMN error_type text;
ALTER TABLE tasks ADD COLUMN error_traceback text;
ALTER TABLE queries ADD COLUMN error_type text;
ALTER TABLE queries ADD COLUMN error_traceback text;
-- Listings and searches newest first walk these (a text search reads a bounded window
-- of the newest rows), instead of sorting every row kept for retention.
CREATE INDEX tasks_created ON tasks (created_at, rowid);
CREATE INDEX queries_created ON queries (created_at, rowid);
