CREATE INDEX tasks_lane_queue ON tasks (site, account, priority DESC, created_at)
    WHERE status = 'queued';
DROP INDEX tasks_queued;
CREATE TABLE task_lanes (
    site          TEXT NOT NULL,
    account       TEXT NOT NULL,
    blocked_by    TEXT,
    head_task     TEXT,
    head_rank     INTEGER,
    head_created  REAL,
    head_seq      INTEGER,
    PRIMARY KEY (site, account)
) WITHOUT ROWID;
CREATE INDEX task_lanes_ready ON task_lanes (head_rank, head_created, head_seq)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
CREATE INDEX task_lanes_ready_by_site ON task_lanes (site, head_rank, head_created, head_seq)
    WHERE blocked_by IS NULL AND head_task IS NOT NULL;
INSERT INTO task_lanes (site, account, head_task, head_rank, head_created, head_seq)
    SELECT site, account, task_id, -priority, created_at, seq FROM (
        SELECT site, account, task_id, priority, created_at, rowid AS seq,
               row_number() OVER (PARTITION BY site, account
                                  ORDER BY priority DESC, created_at, rowid) AS n
        FROM tasks WHERE status = 'queued')
    WHERE n = 1;
INSERT INTO task_lanes (site, account, blocked_by)
    SELECT site, account, task_id FROM tasks WHERE status IN ('leased', 'running', 'stale')
    ON CONFLICT (site, account) DO UPDATE SET blocked_by = excluded.blocked_by;
CREATE TRIGGER task_lanes_insert_queued AFTER INSERT ON tasks
    WHEN NEW.status = 'queued'
BEGIN
    INSERT INTO task_lanes (site, account, head_task, head_rank, head_created, head_seq)
    VALUES (NEW.site, NEW.account, NEW.task_id, -NEW.priority, NEW.created_at, NEW.rowid)
    ON CONFLICT (site, account) DO UPDATE SET
        head_task = excluded.head_task, head_rank = excluded.head_rank,
        head_created = excluded.head_created, head_seq = excluded.head_seq
    WHERE head_task IS NULL OR (excluded.head_rank, excluded.head_created, excluded.head_seq)
                                < (head_rank, head_created, head_seq);
END;
CREATE TRIGGER task_lanes_insert AFTER INSERT ON tasks
    WHEN NEW.status IN ('leased', 'running', 'stale')
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT NEW.site, NEW.account, b.task_id,
           h.task_id, -h.priority, h.created_at, h.seq
    FROM (SELECT 1)
    LEFT JOIN tasks AS b ON b.site = NEW.site AND b.account = NEW.account
        AND b.status IN ('leased', 'running', 'stale')
    LEFT JOIN (SELECT task_id, priority, created_at, rowid AS seq FROM tasks
               WHERE site = NEW.site AND account = NEW.account AND status = 'queued'
               ORDER BY priority DESC, created_at, rowid LIMIT 1) AS h
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = NEW.site AND account = NEW.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;
CREATE TRIGGER task_lanes_update AFTER UPDATE OF status, priority, created_at, site, account
    ON tasks
    WHEN (OLD.status IN ('queued', 'leased', 'running', 'stale') OR NEW.status IN ('queued', 'leased', 'running', 'stale'))
        AND (OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority
             OR OLD.created_at IS NOT NEW.created_at OR OLD.site IS NOT NEW.site
             OR OLD.account IS NOT NEW.account)
        -- in flight to in flight (a start; stale): the same task blocks, the head
        -- is queued work: nothing of the lane changes
        AND NOT (OLD.status IN ('leased', 'running', 'stale') AND NEW.status IN ('leased', 'running', 'stale')
                 AND OLD.site IS NEW.site AND OLD.account IS NEW.account)
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT NEW.site, NEW.account, b.task_id,
           h.task_id, -h.priority, h.created_at, h.seq
    FROM (SELECT 1)
    LEFT JOIN tasks AS b ON b.site = NEW.site AND b.account = NEW.account
        AND b.status IN ('leased', 'running', 'stale')
    LEFT JOIN (SELECT task_id, priority, created_at, rowid AS seq FROM tasks
               WHERE site = NEW.site AND account = NEW.account AND status = 'queued'
               ORDER BY priority DESC, created_at, rowid LIMIT 1) AS h
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = NEW.site AND account = NEW.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;
CREATE TRIGGER task_lanes_leave AFTER UPDATE OF site, account ON tasks
    WHEN OLD.status IN ('queued', 'leased', 'running', 'stale')
        AND (OLD.site IS NOT NEW.site OR OLD.account IS NOT NEW.account)
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT OLD.site, OLD.account, b.task_id,
           h.task_id, -h.priority, h.created_at, h.seq
    FROM (SELECT 1)
    LEFT JOIN tasks AS b ON b.site = OLD.site AND b.account = OLD.account
        AND b.status IN ('leased', 'running', 'stale')
    LEFT JOIN (SELECT task_id, priority, created_at, rowid AS seq FROM tasks
               WHERE site = OLD.site AND account = OLD.account AND status = 'queued'
               ORDER BY priority DESC, created_at, rowid LIMIT 1) AS h
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = OLD.site AND account = OLD.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;
CREATE TRIGGER task_lanes_delete AFTER DELETE ON tasks
    WHEN OLD.status IN ('queued', 'leased', 'running', 'stale')
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT OLD.site, OLD.account, b.task_id,
           h.task_id, -h.priority, h.created_at, h.seq
    FROM (SELECT 1)
    LEFT JOIN tasks AS b ON b.site = OLD.site AND b.account = OLD.account
        AND b.status IN ('leased', 'running', 'stale')
    LEFT JOIN (SELECT task_id, priority, created_at, rowid AS seq FROM tasks
               WHERE site = OLD.site AND account = OLD.account AND status = 'queued'
               ORDER BY priority DESC, created_at, rowid LIMIT 1) AS h
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = OLD.site AND account = OLD.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;

CREATE INDEX queries_ready ON queries (status) WHERE status = 'queued';

CREATE INDEX tasks_paused ON tasks (created_at) WHERE status = 'paused';
CREATE INDEX tasks_stale ON tasks (created_at) WHERE status = 'stale';
