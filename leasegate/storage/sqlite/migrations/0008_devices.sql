CREATE TABLE devices (
    tenant        TEXT NOT NULL,
    device_id     TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('online', 'away', 'gone')),
    first_seen_at REAL NOT NULL,
    last_seen_at  REAL NOT NULL,
    changed_at    REAL NOT NULL,
    version       INTEGER NOT NULL DEFAULT 0,
    pending       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, device_id)
) WITHOUT ROWID;
CREATE INDEX devices_seen ON devices (last_seen_at);
CREATE INDEX devices_state_seen ON devices (state, last_seen_at);
CREATE INDEX devices_pending ON devices (pending) WHERE pending = 1;
CREATE INDEX tasks_device ON tasks (tenant, device_id, status) WHERE device_id IS NOT NULL;
