ALTER TABLE workers ADD COLUMN key_id TEXT;
CREATE INDEX workers_key ON workers (key_id, last_seen_at);
