-- Migration 22: revocations are numbered in the order they commit (1, 2, ...), so that a
-- gateway finds the keys revoked since it last looked with one index seek, whoever
-- revoked them (leasegate keys revoke writes the database from another process; on
-- PostgreSQL, another gateway). NULL: a live key, or one revoked before this migration.

ALTER TABLE api_keys ADD COLUMN revoked_seq INTEGER;
CREATE UNIQUE INDEX api_keys_revoked_seq ON api_keys (revoked_seq)
    WHERE revoked_seq IS NOT NULL;
