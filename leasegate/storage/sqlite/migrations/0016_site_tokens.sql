-- A throttled site's token bucket, one for both channels and every gateway of the
-- database: its tokens as of refilled_at (wall seconds). Each queue actor's lease draws
-- from it in its own transaction. NULL: a new bucket (its rate set since the last draw),
-- one token at its first draw. drawn_by: the channel of the last draw ('task',
-- 'query'), which waits a moment before it takes the next token (queue/sites.py).
ALTER TABLE sites ADD COLUMN tokens REAL;
ALTER TABLE sites ADD COLUMN refilled_at REAL;
ALTER TABLE sites ADD COLUMN drawn_by TEXT;
