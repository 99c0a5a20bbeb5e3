"""SQL of the job history (``job_events``): what happened to each task and query.

The queue actors append a row in the same transaction as the transition it
records, so a history never shows what was rolled back, nor misses what was
committed. ``event_id`` is one AUTOINCREMENT sequence for both channels; every
write transaction takes the database's write lock up front (``BEGIN
IMMEDIATE``), so ids are handed out in commit order and, since a rolled-back
insert gives its id back, the committed ids have no holes (the live stream
relies on both).

On PostgreSQL the id comes from an identity, drawn at the insert, and gateways
commit in any order: a lower id may commit after a higher one is visible. No
lock orders them (one would make every transition of every gateway take turns);
the reader does, as transactional outboxes do (:class:`CommitOrder`): it hands
out the visible ids up to the first missing one, and skips a missing id only
once every transaction that could still commit it has ended. The insert first
makes sure its transaction has an id (``pg_current_xact_id()``, in the same
statement, before the identity draws), so an event id ``n`` is drawn by a
transaction whose id is below the ``xmax`` of any snapshot taken after ``n``
was drawn; once a later snapshot's ``xmin`` (the oldest transaction still in
flight) has passed that ``xmax``, whatever is still missing below ``n`` was
rolled back. A reader that has handed out id ``n`` has handed out every id below
it that will ever commit: ``Last-Event-ID`` resumes exactly.

A job's rows go with the job: triggers delete them when the task or query row
is deleted (retention purge), in that same transaction, whoever deletes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

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
# PostgreSQL has no lastrowid: its insert returns the id (postgres.connection.Cursor).
# The transaction's id is assigned in the statement (no round trip of its own), before
# the identity draws the event's: what CommitOrder's reading relies on.
_XID_FIRST: Final = "(SELECT pg_current_xact_id()) AS xid_first"
_INSERT: Final = Spelled(_INSERT_TEXT, (
    "INSERT INTO job_events (channel, job_id, tenant, site, device_id, kind, status, at, "
    f"detail) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? FROM {_XID_FIRST} RETURNING event_id"))
# PostgreSQL: whether a job's history is now over the cap (the statement's snapshot
# does not see the row it inserts): a row at the cap's offset in the job's own index
# order. Asked as a count, a generic plan made while the table was small filtered
# the channel's whole time index (job_events_by_time) for the job, a scan growing
# with the history.
_OVER: Final = ("EXISTS (SELECT 1 FROM job_events AS e WHERE e.channel = ? "
                "AND e.job_id = {job} ORDER BY e.event_id OFFSET " f"{HISTORY_CAP - 1})")
# PostgreSQL: the insert, and whether the job's history is over the cap.
_INSERT_COUNTED: Final = (f"WITH new AS ({_INSERT.postgresql}) SELECT new.event_id, "
                          f"{_OVER.format(job='?')} AS over FROM new")
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
    values = (channel, job_id, tenant, site, device_id, kind, status, at, detail)
    if dialect(conn) == "postgresql" and kind != "submitted":
        # The insert and the count that says whether to trim, in one round trip.
        event_id, over = conn.execute(_INSERT_COUNTED, (*values, channel, job_id)).fetchone()
        if over:
            _trim(conn, channel, job_id)
    else:
        event_id = conn.execute(_INSERT, values).lastrowid
        if kind != "submitted":  # a job's first event: nothing to trim
            _trim(conn, channel, job_id)
    return {"event_id": event_id, "tenant": tenant, "site": site,
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
        if kind != "submitted":
            _trim_many(conn, channel, [job_id for job_id, _, _ in events])
    else:
        # The insert and which jobs to trim, in one round trip (as append's); a job's
        # first event has nothing to trim.
        counted = kind != "submitted"
        inserted = conn.execute(*((_insert_many_counted(values), [*flat, channel]) if counted
                                  else (_insert_many_pg(values), flat))).fetchall()
        by_job = {r[1]: r[0] for r in inserted}
        ids = [by_job[job_id] for job_id, _, _ in events]
        for row in inserted if counted else ():
            if row[2]:
                _trim(conn, channel, row[1])
    return [{"event_id": event_id, "tenant": row[2], "site": row[3], "device_id": row[4],
             "status": row[6], "kind": job["kind"]}
            for event_id, row, (_, _, job) in zip(ids, rows, events, strict=True)]


def _insert_many_pg(values: str) -> str:
    """PostgreSQL's: the transaction's id assigned first, as in :data:`_INSERT`; the
    event ids returned with their jobs."""
    return (f"INSERT INTO job_events ({_COLUMNS}) SELECT v.* FROM {_XID_FIRST} "
            f"CROSS JOIN (VALUES {values}) AS v ({_COLUMNS}) RETURNING event_id, job_id")


def _insert_many_counted(values: str) -> str:
    """:func:`_insert_many_pg`, each new row with whether its job's history is now
    over the cap (the count's snapshot does not see the rows inserted)."""
    return (f"WITH new AS ({_insert_many_pg(values)}) SELECT new.event_id, new.job_id, "
            f"{_OVER.format(job='new.job_id')} AS over FROM new")


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


# The reader's snapshot beside the rows: the oldest transaction in flight (xmin) and
# the first not yet begun (xmax), of the statement's own snapshot.
_AFTER_PG: Final = _AFTER.replace(
    "FROM job_events AS e",
    ", pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS in_flight_from, "
    "pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS begun_before "
    "FROM job_events AS e")


class CommitOrder:
    """A reader of the events table that hands out ids so that none below one handed
    out commits later (one per tailing gateway; see the module docstring). SQLite's ids
    are dense and in commit order already: there, every row read is handed out.

    A missing id below a visible one is waited for until every transaction that was
    in flight when it was first seen missing has ended (``xmin`` has passed that
    read's ``xmax``): until then it may be a slower transaction's, later it was
    rolled back and is skipped."""

    def __init__(self) -> None:
        # (n, x): every id below n was drawn by a transaction below x.
        self._drawn_below: tuple[int, int] | None = None

    def read(self, conn: Connection, event_id: int, limit: int) -> tuple[list[Row], bool]:
        """Up to ``limit`` events after ``event_id`` that no lower id can follow (each
        with ``job_kind``, as :func:`after`), and whether more are visible but held back
        behind an id still missing (read again soon)."""
        if dialect(conn) == "sqlite":
            return after(conn, event_id, limit), False
        rows = conn.execute(_AFTER_PG, (event_id, limit)).fetchall()
        handed: list[Row] = []
        expected = event_id + 1
        settled_below = self._settled_below(rows[0]["in_flight_from"]) if rows else 0
        for row in rows:
            n = row["event_id"]
            if n != expected and n > settled_below:
                # A hole seen before keeps its first sighting's xmax (a later one would
                # push its end away while it lasts); a settled or passed one is replaced.
                known = self._drawn_below
                if known is None or settled_below or known[0] <= expected:
                    self._drawn_below = (n, row["begun_before"])
                return handed, True
            handed.append(row)
            expected = n + 1
        return handed, False

    def _settled_below(self, in_flight_from: int) -> int:
        """The id below which nothing missing can still commit (0: none known)."""
        if self._drawn_below is None:
            return 0
        below, begun_before = self._drawn_below
        return below if in_flight_from >= begun_before else 0
