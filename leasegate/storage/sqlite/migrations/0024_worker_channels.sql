-- Worker presence on both channels: when a worker was last seen on each (NULL: never),
-- and the sites its query lease calls serve (sites: its task lease calls'). last_seen_at
-- stays the latest sighting on either. Every worker seen so far was seen on tasks.
ALTER TABLE workers ADD COLUMN task_seen_at REAL;
ALTER TABLE workers ADD COLUMN query_seen_at REAL;
ALTER TABLE workers ADD COLUMN query_sites TEXT;
UPDATE workers SET task_seen_at = last_seen_at;
