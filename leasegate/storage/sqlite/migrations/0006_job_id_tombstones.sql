CREATE TABLE task_tombstones (
    task_id     TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('succeeded', 'failed', 'canceled', 'expired')),
    purged_at   REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX task_tombstones_purged ON task_tombstones (purged_at);
CREATE TRIGGER tasks_never_reuse_a_tombstoned_id BEFORE INSERT ON tasks
    WHEN EXISTS (SELECT 1 FROM task_tombstones WHERE task_id = NEW.task_id)
BEGIN
    SELECT RAISE(IGNORE);
END;

CREATE TABLE query_tombstones (
    query_id    TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('succeeded', 'failed', 'expired')),
    purged_at   REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX query_tombstones_purged ON query_tombstones (purged_at);
CREATE TRIGGER queries_never_reuse_a_tombstoned_id BEFORE INSERT ON queries
    WHEN EXISTS (SELECT 1 FROM query_tombstones WHERE query_id = NEW.query_id)
BEGIN
    SELECT RAISE(IGNORE);
END;
