-- Migration 22: revocations are numbered in the order they commit (1, 2, ...), so that a
-- gateway finds the keys revoked since it last looked with one index seek, whoever
-- revoked them (another gateway, or leasegate keys revoke; each numbers its revocation
-- under the keys actor's turn lock, so numbers never repeat and commit in order). NULL:
-- a live key, or one revoked before this migration.

ALTER TABLE api_keys ADD COLUMN revoked_seq bigint;
CREATE UNIQUE INDEX api_keys_revoked_seq ON api_keys (revoked_seq)
    WHERE revoked_seq IS NOT NULL;
