DROP INDEX tasks_one_per_lane;
CREATE UNIQUE INDEX tasks_one_per_lane ON tasks (site, account) WHERE (status = 'leased' OR status = 'running' OR status = 'stale');
DROP INDEX tasks_lease_owner;
CREATE INDEX tasks_lease_owner ON tasks (lease_owner, lease_request_id) WHERE (status = 'leased' OR status = 'running' OR status = 'stale');
DROP TRIGGER task_lanes_insert;
DROP TRIGGER task_lanes_update;
DROP TRIGGER task_lanes_leave;
DROP TRIGGER task_lanes_delete;
CREATE TRIGGER task_lanes_insert AFTER INSERT ON tasks
    WHEN (NEW.status = 'leased' OR NEW.status = 'running' OR NEW.status = 'stale')
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT NEW.site, NEW.account,
           (SELECT task_id FROM tasks WHERE site = NEW.site AND account = NEW.account
                AND (status = 'leased' OR status = 'running' OR status = 'stale')),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = NEW.site AND account = NEW.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
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
    WHEN ((OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running' OR OLD.status = 'stale') OR (NEW.status = 'queued' OR NEW.status = 'leased' OR NEW.status = 'running' OR NEW.status = 'stale'))
        AND (OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority
             OR OLD.created_at IS NOT NEW.created_at OR OLD.site IS NOT NEW.site
             OR OLD.account IS NOT NEW.account)
        -- in flight to in flight (a start; stale): the same task blocks, the head
        -- is queued work: nothing of the lane changes
        AND NOT ((OLD.status = 'leased' OR OLD.status = 'running' OR OLD.status = 'stale') AND (NEW.status = 'leased' OR NEW.status = 'running' OR NEW.status = 'stale')
                 AND OLD.site IS NEW.site AND OLD.account IS NEW.account)
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT NEW.site, NEW.account,
           (SELECT task_id FROM tasks WHERE site = NEW.site AND account = NEW.account
                AND (status = 'leased' OR status = 'running' OR status = 'stale')),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = NEW.site AND account = NEW.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = NEW.site AND account = NEW.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;
CREATE TRIGGER task_lanes_leave AFTER UPDATE OF site, account ON tasks
    WHEN (OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running' OR OLD.status = 'stale')
        AND (OLD.site IS NOT NEW.site OR OLD.account IS NOT NEW.account)
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT OLD.site, OLD.account,
           (SELECT task_id FROM tasks WHERE site = OLD.site AND account = OLD.account
                AND (status = 'leased' OR status = 'running' OR status = 'stale')),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = OLD.site AND account = OLD.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = OLD.site AND account = OLD.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;
CREATE TRIGGER task_lanes_delete AFTER DELETE ON tasks
    WHEN (OLD.status = 'queued' OR OLD.status = 'leased' OR OLD.status = 'running' OR OLD.status = 'stale')
BEGIN
    INSERT INTO task_lanes (site, account, blocked_by,
                            head_task, head_rank, head_created, head_seq)
    SELECT OLD.site, OLD.account,
           (SELECT task_id FROM tasks WHERE site = OLD.site AND account = OLD.account
                AND (status = 'leased' OR status = 'running' OR status = 'stale')),
           h.task_id, -h.priority, h.created_at, h.rowid
    FROM (SELECT 1)
    LEFT JOIN tasks AS h ON h.rowid = (
        SELECT rowid FROM tasks INDEXED BY tasks_lane_queue
        WHERE site = OLD.site AND account = OLD.account AND status = 'queued'
        ORDER BY priority DESC, created_at, rowid LIMIT 1)
    WHERE true
    ON CONFLICT (site, account) DO UPDATE SET
        blocked_by = excluded.blocked_by, head_task = excluded.head_task,
        head_rank = excluded.head_rank, head_created = excluded.head_created,
        head_seq = excluded.head_seq;
    DELETE FROM task_lanes WHERE site = OLD.site AND account = OLD.account
        AND blocked_by IS NULL AND head_task IS NULL;
END;
