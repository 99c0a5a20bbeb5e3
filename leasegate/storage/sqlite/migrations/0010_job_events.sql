CREATE TABLE job_events (
    event_id   INTEGER PRIMARY KEY AUTOINCREMENT,
    channel    TEXT NOT NULL CHECK (channel IN ('task', 'query')),
    job_id     TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    site       TEXT NOT NULL,
    device_id  TEXT,
    kind       TEXT NOT NULL,
    status     TEXT NOT NULL,
    at         REAL NOT NULL,
    detail     TEXT NOT NULL
);
CREATE INDEX job_events_by_job ON job_events (channel, job_id, event_id);
CREATE TRIGGER job_events_purge_task AFTER DELETE ON tasks BEGIN
    DELETE FROM job_events WHERE channel = 'task' AND job_id = OLD.task_id;
END;
CREATE TRIGGER job_events_purge_query AFTER DELETE ON queries BEGIN
    DELETE FROM job_events WHERE channel = 'query' AND job_id = OLD.query_id;
END;
