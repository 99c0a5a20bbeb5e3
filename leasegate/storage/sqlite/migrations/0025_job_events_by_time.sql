-- The console's per-minute charts and its failures by site read a channel's events of
-- the last hour (or day) by time: an index on (channel, at) makes each read a range.
CREATE INDEX job_events_by_time ON job_events (channel, at);
