CREATE TABLE artifacts (
    task_id    TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    size       INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (task_id, name)
);
