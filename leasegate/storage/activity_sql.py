"""SQL of the console's figures read from the job history (``job_events``): a
channel's submits, completions and dispatch waits per minute, and its failures by
site. Each is one aggregate over a time range of ``job_events_by_time`` (channel,
at), so it reads the range asked for, never the whole history; ``events_sql`` keeps
the writes.

What counts matches ``http.metrics.jobs``: a completion is an event that left the job
in a final status (the ledger's later ``settled`` excepted), a dispatch wait is the
``waited`` of a job's first lease (``attempt`` 1).
"""

from __future__ import annotations

from typing import Final

from leasegate.storage.engine import Connection, Row, respelled

_FINAL: Final = "('succeeded', 'failed', 'canceled', 'expired')"
_FIRST_LEASE: Final = "kind = 'leased' AND json_extract(detail, '$.attempt') = 1"
_WAITED: Final = "json_extract(detail, '$.waited')"
_PER_MINUTE: Final = respelled(
    "SELECT CAST(at / 60 AS INTEGER) AS minute, "
    "SUM(CASE WHEN kind = 'submitted' THEN 1 ELSE 0 END) AS submits, "
    f"SUM(CASE WHEN status IN {_FINAL} AND kind <> 'settled' THEN 1 ELSE 0 END) "
    "AS completions, "
    f"SUM(CASE WHEN {_FIRST_LEASE} AND {_WAITED} IS NOT NULL THEN 1 ELSE 0 END) "
    "AS dispatches, "
    f"SUM(CASE WHEN {_FIRST_LEASE} THEN COALESCE({_WAITED}, 0) ELSE 0 END) AS waited "
    "FROM job_events WHERE channel = ? AND at >= ? AND at <= ? GROUP BY 1",
    ("CAST(at / 60 AS INTEGER)", "CAST(floor(at / 60) AS bigint)"),
    ("json_extract(detail, '$.attempt') = 1", "(detail::jsonb ->> 'attempt') = '1'"),
    (_WAITED, "CAST(detail::jsonb ->> 'waited' AS double precision)"))
_FAILURES_BY_SITE: Final = (
    "SELECT site, "
    "SUM(CASE WHEN status = 'failed' AND at >= ? THEN 1 ELSE 0 END) AS failed_recent, "
    "SUM(CASE WHEN status = 'expired' AND at >= ? THEN 1 ELSE 0 END) AS expired_recent, "
    "SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failed, "
    "SUM(CASE WHEN status = 'expired' THEN 1 ELSE 0 END) AS expired "
    "FROM job_events WHERE channel = ? AND at >= ? AND at <= ? "
    "AND status IN ('failed', 'expired') AND kind <> 'settled' "
    "GROUP BY site ORDER BY COUNT(*) DESC, site LIMIT ?")


def per_minute(conn: Connection, channel: str, since: float, until: float) -> list[Row]:
    """``minute``, ``submits``, ``completions``, ``dispatches`` (first leases) and
    ``waited`` (the seconds they waited in all) for each minute (``at // 60``) from
    ``since`` to ``until`` that has events; the others had none. PostgreSQL sums as
    numeric: the reader converts."""
    rows: list[Row] = conn.execute(_PER_MINUTE, (channel, since, until)).fetchall()
    return rows


def failures_by_site(conn: Connection, channel: str, since: float, recent: float,
                     until: float, limit: int) -> list[Row]:
    """``site``, ``failed_recent`` and ``expired_recent`` (since ``recent``), ``failed``
    and ``expired`` (since ``since``) for the ``limit`` sites with the most, the most
    first."""
    rows: list[Row] = conn.execute(
        _FAILURES_BY_SITE, (recent, recent, channel, since, until, limit)).fetchall()
    return rows
