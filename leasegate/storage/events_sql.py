"""SQL of the job history (``job_events``): what happened to each task and query.

The queue actors append a row in the same transaction as the transition it
records, so a history never shows what was rolled back, nor misses what was
committed. ``event_id`` is one AUTOINCREMENT sequence for both channels; every
write transaction takes the database's write lock up front (``BEGIN
IMMEDIATE``), so ids are handed out in commit order and, since a rolled-back
insert gives its id back, the committed ids have no holes (the live stream
relies on both). On PostgreSQL the id comes from an identity, and the insert
first takes the transaction advisory lock :data:`EVENTS_LOCK`, held to the
commit: every gateway's transactions that record events take turns from their
first event to their commit, so ids are handed out in commit order there too. A
reader tailing the table by id (:func:`after`, each gateway's live stream) never
misses a row committed late with a lower id. Holes remain (a rolled-back insert
keeps its id), so a tailer takes what it reads and waits for no id.

Why a lock and not a commit-time sequence or a snapshot horizon: PostgreSQL has
neither a sequence drawn at commit nor a way to see the lowest id an open
transaction holds. The lock serializes only transactions that record events;
each actor's turns are serialized across gateways anyway, so what it adds is the
task and query actors taking turns with each other, from an event to a commit.

A job's rows go with the job: triggers delete them when the task or query row
is deleted (retention purge), in that same transaction, whoever deletes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from leasegate.storage.connection import transaction
from leasegate.storage.engine import Connection, Row, Spelled, dialect

Channel = Literal["task", "query"]
JobRow = Row | Mapping[str, Any]  # the job's own columns, as read or as known

# Per job: past HISTORY_CAP rows, the oldest row after the first KEEP_FIRST goes
# (a long batch task renews for hours; its start and its latest moves matter most).
HISTORY_CAP: Final = 200
KEEP_FIRST: Final = 20

_JOB_ROW: Final = {
    "task": "SELECT tenant, site, device_id, status, kind FROM tasks WHERE task_id = ?",
    "query": "SELECT tenant, site, NULL AS device_id, status, kind FROM queries "
             "WHERE query_id = ?",
}
_COLUMNS: Final = "channel, job_id, tenant, site, device_id, kind, status, at, detail"
_INSERT_TEXT: Final = f"INSERT INTO job_events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
# The key of the PostgreSQL advisory lock that orders event ids by commit ("lg events").
EVENTS_LOCK: Final = int.from_bytes(b"lgevents", "big") >> 1
# PostgreSQL has no lastrowid: its insert returns the id (postgres.connection.Cursor).
# The lock is taken in the statement (no round trip of its own) before the identity
# draws the id; taking it again in one transaction costs a lookup in the server's
# local lock table. Not once per turn: a lock taken inside a savepoint that is rolled
# back is released with it.
_INSERT: Final = Spelled(_INSERT_TEXT, (
    "INSERT INTO job_events (channel, job_id, tenant, site, device_id, kind, status, at, "
    "detail) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? "
    f"FROM (SELECT pg_advisory_xact_lock({EVENTS_LOCK})) AS in_commit_order "
    "RETURNING event_id"))
_LAST_ID: Final = Spelled("SELECT seq FROM sqlite_sequence WHERE name = 'job_events'",
                          "SELECT last_value FROM job_events_event_id_seq WHERE is_called")


def append(conn: Connection, channel: Channel, job_id: str, kind: str,
           detail: str, at: float, job: JobRow | None = None,
           ) -> dict[str, Any] | None:
    """Record ``kind`` (``detail``: a JSON object's text) for the job as it is now (its
    status after the transition; ``job``: its row as it is now, if the caller holds
    it, else it is read); the new row's event_id, tenant, site, device_id, status and
    the job's kind, or None when the job does not exist (purged meanwhile).

    A read and a plain insert: INSERT ... SELECT ... RETURNING would be one statement,
    but costs twice their time (RETURNING runs as a trigger of its own)."""
    if job is None:
        job = conn.execute(_JOB_ROW[channel], (job_id,)).fetchone()
        if job is None:
            return None
    tenant, site, status = job["tenant"], job["site"], job["status"]
    device_id = job["device_id"] if channel == "task" else None
    cur = conn.execute(_INSERT, (channel, job_id, tenant, site, device_id, kind, status, at,
                                 detail))
    if kind != "submitted":  # a job's first event: nothing to trim
        _trim(conn, channel, job_id)
    return {"event_id": cur.lastrowid, "tenant": tenant, "site": site,
            "device_id": device_id, "status": status, "kind": job["kind"]}


def append_many(conn: Connection, channel: Channel, kind: str, at: float,
                events: Sequence[tuple[str, str, JobRow]]) -> list[dict[str, Any]]:
    """:func:`append` for many jobs (distinct ones), each ``(job_id, detail, job)`` with
    its row as it is now, in one INSERT: the new rows, in the order given."""
    rows = [(channel, job_id, job["tenant"], job["site"],
             job["device_id"] if channel == "task" else None, kind, job["status"], at, detail)
            for job_id, detail, job in events]
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
    flat = [value for row in rows for value in row]
    if dialect(conn) == "sqlite":
        # One writer, one statement: AUTOINCREMENT hands the rows consecutive ids.
        last = conn.execute(f"INSERT INTO job_events ({_COLUMNS}) VALUES {values}",
                            flat).lastrowid
        assert last is not None
        ids = list(range(last - len(rows) + 1, last + 1))
    else:
        by_job = {r[1]: r[0] for r in conn.execute(_insert_many_pg(values), flat)}
        ids = [by_job[job_id] for job_id, _, _ in events]
    if kind != "submitted":
        _trim_many(conn, channel, [job_id for job_id, _, _ in events])
    return [{"event_id": event_id, "tenant": row[2], "site": row[3], "device_id": row[4],
             "status": row[6], "kind": job["kind"]}
            for event_id, row, (_, _, job) in zip(ids, rows, events, strict=True)]


def _insert_many_pg(values: str) -> str:
    """PostgreSQL's: the lock of :data:`_INSERT` taken in the statement, the ids
    returned with their jobs."""
    return (f"INSERT INTO job_events ({_COLUMNS}) SELECT v.* FROM (VALUES {values}) "
            f"AS v ({_COLUMNS}) CROSS JOIN (SELECT pg_advisory_xact_lock({EVENTS_LOCK})) "
            "AS in_commit_order RETURNING event_id, job_id")


def _trim_many(conn: Connection, channel: str, job_ids: Sequence[str]) -> None:
    """:func:`_trim` for the jobs whose history is over the cap (one statement finds
    them: usually none)."""
    for (job_id,) in conn.execute(
            f"SELECT job_id FROM job_events WHERE channel = ? AND job_id IN "
            f"({', '.join('?' for _ in job_ids)}) GROUP BY job_id HAVING count(*) > ?",
            [channel, *job_ids, HISTORY_CAP]).fetchall():
        _trim(conn, channel, job_id)


def _trim(conn: Connection, channel: str, job_id: str) -> None:
    """Keep a job's history at HISTORY_CAP rows: the first KEEP_FIRST and the latest."""
    over = conn.execute(
        "SELECT 1 FROM job_events WHERE channel = ? AND job_id = ? "
        "ORDER BY event_id LIMIT 1 OFFSET ?", (channel, job_id, HISTORY_CAP)).fetchone()
    if over is None:
        return
    conn.execute(
        "DELETE FROM job_events WHERE event_id = (SELECT event_id FROM job_events "
        "WHERE channel = ? AND job_id = ? ORDER BY event_id LIMIT 1 OFFSET ?)",
        (channel, job_id, KEEP_FIRST))


def history(conn: Connection, channel: Channel, job_id: str) -> list[Row]:
    """A job's events, oldest first (at most HISTORY_CAP)."""
    return conn.execute(
        "SELECT * FROM job_events WHERE channel = ? AND job_id = ? ORDER BY event_id",
        (channel, job_id)).fetchall()


def last_event_id(conn: Connection) -> int:
    """The last id handed out (0 if none ever was), purged rows included."""
    row = conn.execute(_LAST_ID).fetchone()
    return 0 if row is None else int(row[0])


_AFTER: Final = (
    "SELECT e.event_id, e.channel, e.job_id, e.tenant, e.site, e.device_id, e.kind, "
    "e.status, e.at, e.detail, coalesce(t.kind, q.kind, '') AS job_kind "
    "FROM job_events AS e "
    "LEFT JOIN tasks AS t ON e.channel = 'task' AND t.task_id = e.job_id "
    "LEFT JOIN queries AS q ON e.channel = 'query' AND q.query_id = e.job_id "
    "WHERE e.event_id > ? ORDER BY e.event_id LIMIT ?")


def after(conn: Connection, event_id: int, limit: int) -> list[Row]:
    """Up to ``limit`` events after ``event_id``, in id order, each with its job's kind
    (``job_kind``; '' once the job is purged): what a gateway tails on PostgreSQL."""
    return conn.execute(_AFTER, (event_id, limit)).fetchall()


def committed_last_event_id(conn: Connection) -> int:
    """The last id handed out, once every transaction that drew one has ended (on
    PostgreSQL: read under :data:`EVENTS_LOCK`, so no lower id commits later). Where a
    gateway's tail starts."""
    if dialect(conn) == "sqlite":
        return last_event_id(conn)
    with transaction(conn):
        conn.execute(f"SELECT pg_advisory_xact_lock({EVENTS_LOCK})")
        return last_event_id(conn)
