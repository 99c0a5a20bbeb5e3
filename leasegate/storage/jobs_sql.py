"""SQL both job tables share: a job by id (or many, in one statement), a new job (or
a batch of them, in one statement), which of some ids are taken, and the purge of
finished jobs (each leaving a tombstone that keeps its id taken) and of tombstones
past theirs.

``tasks_sql`` and ``queries_sql`` each name their table once, as their ``JOBS`` (a
``JobTable``: ``tasks_sql.JOBS.get``), beside what only they do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from leasegate.storage.engine import Connection, Row
from leasegate.storage.rows import insert_rows, known_ids, rows_by_key, update_rows
from leasegate.storage.turn_locks import Shared, lock_scopes


class JobTable:
    """A job table (``tasks``), its id column (``task_id``) and its tombstones
    (``task_tombstones``: a purged job's id, tenant, fingerprint and status)."""

    def __init__(self, table: str, key: str, tombstones: str, *, finished: str) -> None:
        """``finished``: the condition of a row the purge may delete once its
        ``completed_at`` is past retention."""
        self.table, self.key, self.tombstones = table, key, tombstones
        # The statements, spelled once (they are the caller's constants, never a client's).
        self._get = f"SELECT * FROM {table} WHERE {key} = ?"
        self._finished = (f"SELECT {key} FROM {table} WHERE {finished} "
                          "AND completed_at <= ? LIMIT ?")
        self._bury = (f"INSERT INTO {tombstones} ({key}, tenant, fingerprint, status, "
                      f"purged_at) SELECT {key}, tenant, fingerprint, status, ? FROM {table} "
                      f"WHERE {key} = ?")
        self._delete = f"DELETE FROM {table} WHERE {key} = ?"
        self._forget = (f"DELETE FROM {tombstones} WHERE {key} IN (SELECT {key} FROM "
                        f"{tombstones} WHERE purged_at <= ? LIMIT ?)")
        # Across gateways, a purge and a submit of an id it buries must not cross: the
        # submit's insert would wait for the purge's delete and then insert, its
        # tombstone check already made. Submits of ids a client chose take it shared
        # (beside each other), the purge exclusive.
        self.ids_scope = f"job ids {table}"

    def submit_scope(self, given_id: str | None) -> tuple[str, ...]:
        """The lock a submit of ``given_id`` holds (a server's id is never buried)."""
        return () if given_id is None else (Shared(self.ids_scope),)

    def get(self, conn: Connection, job_id: str) -> Row | None:
        row: Row | None = conn.execute(self._get, (job_id,)).fetchone()
        return row

    def get_many(self, conn: Connection, job_ids: Sequence[str]) -> dict[str, Row]:
        """The jobs of ``job_ids`` (one that does not exist left out), by id, in one read."""
        return rows_by_key(conn, self.table, self.key, job_ids)

    def insert_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert new jobs in one statement; how many (one whose id exists already or
        has a tombstone is not)."""
        return insert_rows(conn, self.table, self.key, rows)

    def known(self, conn: Connection, job_ids: Sequence[str]) -> dict[str, Row]:
        """Of ``job_ids``, those of a job or a tombstone (``fingerprint``, ``status``)."""
        return known_ids(conn, self.table, self.tombstones, self.key, job_ids)

    def finish_many(self, conn: Connection, finishes: Sequence[Outcome],
                    columns: Mapping[str, str], changes: str, unfinished: str, where: str,
                    now: float) -> list[Row]:
        """Each of ``finishes`` onto its job's row, in one UPDATE (``update_rows``): what
        both channels write (:data:`OUTCOME`, the lease ended, ``updated_at``, and
        ``completed_at`` unless the status is ``unfinished``), then the channel's own
        ``columns`` (name: SQL type) as ``changes`` sets them; a row ``where`` refuses
        (the fence, reading ``v``) is left as it was. The rows, as they are now."""
        every = {**OUTCOME, **columns}
        return update_rows(conn, self.table, self.key, every,
                           [finish.values(every) for finish in finishes], (
            "status = v.status, lease_expires_at = NULL, result = v.result, "
            "error_code = v.error_code, error_message = v.error_message, cost = v.cost, "
            "outcome_digest = v.outcome_digest, error_type = v.error_type, "
            f"error_traceback = v.error_traceback, {changes}, updated_at = ?, "
            f"completed_at = CASE WHEN v.status = '{unfinished}' THEN NULL ELSE ? END"),
            [now, now], where)

    def purge_completed_before(self, conn: Connection, cutoff: float, now: float,
                               limit: int = 1000) -> list[str]:
        """Delete finished jobs past retention, leaving a tombstone for each in the
        same transaction; their ids."""
        lock_scopes(conn, [self.ids_scope])
        ids = [(row[0],) for row in conn.execute(self._finished, (cutoff, limit))]
        conn.executemany(self._bury, [(now, i) for (i,) in ids])
        conn.executemany(self._delete, ids)
        return [i for (i,) in ids]

    def purge_tombstones_before(self, conn: Connection, cutoff: float,
                                limit: int = 1000) -> int:
        """Forget tombstones laid at or before ``cutoff``: their ids are free again."""
        cur = conn.execute(self._forget, (cutoff, limit))
        return cur.rowcount


@dataclass(frozen=True)
class Outcome:
    """A worker's outcome as its job's row takes it (each channel's ``finish_many``):
    what both channels write; each adds its own columns."""

    job_id: str
    lease_token: str
    status: str
    result: str | None
    error_code: int | None
    error_message: str | None
    cost: int | None
    outcome_digest: str
    error_type: str | None
    error_traceback: str | None

    def values(self, columns: Iterable[str]) -> tuple[Any, ...]:
        """The job's id, then the value of each of ``columns``: a row of ``VALUES``."""
        return (self.job_id, *(getattr(self, column) for column in columns))


OUTCOME: Final = {"lease_token": "TEXT", "status": "TEXT", "result": "TEXT",
                  "error_code": "BIGINT", "error_message": "TEXT", "cost": "BIGINT",
                  "outcome_digest": "TEXT", "error_type": "TEXT", "error_traceback": "TEXT"}
"""The columns of an :class:`Outcome` (beside its id) and their SQL types."""
