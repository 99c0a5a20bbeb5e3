"""SQL helpers every table module shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from leasegate.storage.engine import Connection, Row, dialect, respelled, skip_locked


def marks(values: Sequence[Any]) -> str:
    """``?, ?, ?``: one placeholder per value, for ``IN (...)`` and ``VALUES (...)``."""
    return ", ".join("?" for _ in values)


def insert_rows(conn: Connection, table: str, key: str,
                rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert rows (the same columns each, in the same order) in one statement, each
    unless its ``key`` exists; how many were inserted. ``table``, ``key`` and the
    column names are the caller's constants, never a client's."""
    columns = list(rows[0])
    values = ", ".join([f"({marks(columns)})"] * len(rows))
    cur = conn.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values} "
        f"ON CONFLICT ({key}) DO NOTHING", [row[column] for row in rows for column in columns])
    return cur.rowcount


def known_ids(conn: Connection, table: str, tombstones: str, key: str,
              ids: Sequence[str]) -> dict[str, Row]:
    """Of ``ids``, those taken by a row of ``table`` or a tombstone: each one's row
    (``fingerprint``, ``status``), in one statement."""
    if not ids:
        return {}
    listed = marks(ids)
    return {row[0]: row for row in conn.execute(
        f"SELECT {key}, fingerprint, status FROM {table} WHERE {key} IN ({listed}) "
        f"UNION ALL SELECT {key}, fingerprint, status FROM {tombstones} "
        f"WHERE {key} IN ({listed})", [*ids, *ids])}


def lease_rows(conn: Connection, table: str, key: str, tokens: Sequence[tuple[str, str]],
               changes: str, args: Sequence[Any], *, also: str = "true") -> list[Row]:
    """queued → leased for each ``(id, token)`` in one UPDATE, each row its own token
    (``CASE key WHEN ? THEN ? ... END``), ``changes`` (with ``args``) set beside it: the
    rows that took their token, as the UPDATE returns them, in the order given (one no
    longer queued, or not ``also``, is left out)."""
    ids = [job_id for job_id, _ in tokens]
    whens = " ".join(["WHEN ? THEN ?"] * len(tokens))
    which = f"{key} IN ({marks(ids)}) AND status = 'queued' AND {also}"
    if dialect(conn) == "postgresql":
        # A row another gateway is leasing right now is skipped, not waited for: it
        # is theirs once they commit (the lease goes on with what it got).
        which = f"{key} IN (SELECT {key} FROM {table} WHERE {which} FOR UPDATE SKIP LOCKED)"
    leased = {row[key]: row for row in conn.execute(
        f"UPDATE {table} SET lease_token = CASE {key} {whens} END, {changes} "
        f"WHERE {which} RETURNING *",
        [*(value for pair in tokens for value in pair), *args, *ids]).fetchall()}
    return [leased[job_id] for job_id in ids if job_id in leased]


def rows_by_key(conn: Connection, table: str, key: str, ids: Sequence[str]) -> dict[str, Row]:
    """The rows of ``ids`` (one that does not exist left out), by id, in one statement."""
    if not ids:
        return {}
    return {row[key]: row for row in conn.execute(
        f"SELECT * FROM {table} WHERE {key} IN ({marks(ids)})", ids)}


def update_rows(conn: Connection, table: str, key: str, columns: Mapping[str, str],
                rows: Sequence[Sequence[Any]], changes: str, args: Sequence[Any],
                where: str) -> list[Row]:
    """Many rows updated in one statement, each with values of its own: each of ``rows``
    is an id then a value per one of ``columns`` (name: its SQL type), a row of the
    table ``v`` that ``changes`` (the SET list, ``args`` its placeholders) and ``where``
    (beside ``{table}.{key} = v.{key}``; no placeholders) read as ``v.<name>``. The rows
    that changed, as they are now, in no order (one ``where`` refuses is left as it was).

    ``UPDATE ... FROM (VALUES ...) RETURNING``, as SQLite (3.35 on) and PostgreSQL both
    take it (PostgreSQL's ``*`` would return ``v`` too). The first row's values are cast
    to their types: PostgreSQL types a ``VALUES`` column of NULLs only as text, which an
    integer column refuses. As :func:`insert_rows`, the names are the caller's constants,
    never a client's."""
    names = [key, *columns]
    if len(rows) == 1:  # one row (a single result): a row of parameters, no VALUES to
        # materialize (see docs/design-notes.md, "Figures behind small choices")
        source = ", ".join([f"? AS {key}", *(f"CAST(? AS {kind}) AS {name}"
                                               for name, kind in columns.items())])
    else:
        first = ", ".join(["?", *(f"CAST(? AS {kind})" for kind in columns.values())])
        values = ", ".join([f"({first})", *[f"({marks(names)})"] * (len(rows) - 1)])
        listed = ", ".join(f"column{n} AS {name}" for n, name in enumerate(names, 1))
        source = f"{listed} FROM (VALUES {values}) AS listed"
    statement = respelled(
        f"UPDATE {table} SET {changes} FROM (SELECT {source}) AS v "
        f"WHERE {table}.{key} = v.{key} AND {where} RETURNING *",
        (" RETURNING *", f" RETURNING {table}.*"))
    changed: list[Row] = conn.execute(
        statement, [*args, *(value for row in rows for value in row)]).fetchall()
    return changed


def expire_each(conn: Connection, select: str, params: Sequence[Any], update: str,
                reason: Callable[[Row], str], now: float) -> list[Row]:
    """The jobs ``select`` finds (its first column the id) expired one at a time, each
    with its own ``reason``: ``update``'s parameters are the reason, ``now`` (updated
    and completed) and the id. The rows as found."""
    rows: list[Row] = conn.execute(skip_locked(select), tuple(params)).fetchall()
    for row in rows:
        conn.execute(update, (reason(row), now, now, row[0]))
    return rows
