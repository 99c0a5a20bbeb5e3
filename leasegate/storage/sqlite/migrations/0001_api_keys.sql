CREATE TABLE api_keys (
    key_id      TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('client', 'worker', 'admin')),
    name        TEXT NOT NULL,
    tenant      TEXT,
    sites       TEXT,
    created_at  REAL NOT NULL,
    revoked_at  REAL
);
