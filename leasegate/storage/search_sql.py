"""A search through the tasks or the queries, newest first, a page at a time.

Filters by equality (status, site, account, kind, tenant, worker), an id prefix, a
range of creation times, and text inside a job's params and error. The same text on
both engines, with the same results:

- **id prefix**: a range of the id column, compared bytewise (SQLite's BINARY, spelled
  ``COLLATE "C"`` on PostgreSQL, whose default collation may order ``-`` and ``.``
  otherwise). Ids are ASCII below ``\\x7f``, so every id that starts with the prefix
  sorts in ``[prefix, prefix + "\\x7f")``.
- **text**: a substring, ASCII letters in either case, found with ``instr`` /
  ``strpos`` on the ASCII-lowered column (SQLite's ``lower()`` lowers ASCII only;
  PostgreSQL's would lower every script, so it is spelled ``translate``). No ``LIKE``:
  its case rules differ between the engines and its wildcards would need escaping.
  Params are stored as compact JSON, so the text is looked for as typed and as a JSON
  string would spell it (``"`` as ``\\"``).

Cost: a text search reads at most :data:`TEXT_WINDOW` rows, the newest that match
the other filters (walked in ``created_at`` order on the ``*_created`` index), and
says whether that window held every row it could have (:class:`Searched`): older
rows are found by narrowing the search (``until``, a site, a status), never by an
unbounded scan of up to 64 KiB of params a row inside an actor's turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from leasegate.storage.engine import Connection, Row, dialect

TEXT_WINDOW = 10_000
"""The most rows a text search reads (the newest matching the other filters)."""

_ID_END = "\x7f"  # above every character an id may hold
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = str.maketrans(_UPPER, _UPPER.lower())


@dataclass(frozen=True)
class Search:
    """What to look for; ``None`` is off. ``equal`` maps a column (the caller's
    constant, never a client's text) to the value it must hold."""

    equal: dict[str, str | None]
    id_prefix: str | None = None
    since: float | None = None  # created at or after
    until: float | None = None  # created before
    text: str | None = None


@dataclass(frozen=True)
class Searched:
    """How much a text search read: ``rows`` (at most :data:`TEXT_WINDOW`), and
    whether that was every row the other filters match (``complete``)."""

    rows: int = field(metadata={"description": (
        "How many jobs the text search read (the newest matching the other filters; at "
        f"most {TEXT_WINDOW:,}).")})
    complete: bool = field(metadata={"description": (
        "Whether those were all the jobs the other filters match (else narrow them to "
        "reach older ones).")})


def lowered(text: str) -> str:
    """``text`` with its ASCII letters lowered, as the search compares."""
    return text.translate(_ASCII_LOWER)


def _text_columns(conn: Connection, columns: tuple[str, ...]) -> list[str]:
    if dialect(conn) == "sqlite":
        return [f"lower({c})" for c in columns]
    return [f"translate({c}, '{_UPPER}', '{_UPPER.lower()}')" for c in columns]


def _needles(text: str) -> list[str]:
    """The text as typed and as a JSON string spells it (one, when they agree)."""
    typed = lowered(text)
    quoted = lowered(json.dumps(text, ensure_ascii=False)[1:-1])
    return [typed] if quoted == typed else [typed, quoted]


def _filters(conn: Connection, id_column: str, search: Search) -> tuple[str, list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    for column, value in search.equal.items():
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if search.id_prefix is not None:
        collate = "" if dialect(conn) == "sqlite" else ' COLLATE "C"'
        where.append(f"{id_column}{collate} >= ? AND {id_column}{collate} < ?")
        args += [search.id_prefix, search.id_prefix + _ID_END]
    if search.since is not None:
        where.append("created_at >= ?")
        args.append(search.since)
    if search.until is not None:
        where.append("created_at < ?")
        args.append(search.until)
    return (" WHERE " + " AND ".join(where)) if where else "", args


def _text_filter(conn: Connection, text: str, columns: tuple[str, ...]) -> tuple[str, list[Any]]:
    strpos = "instr({column}, ?) > 0" if dialect(conn) == "sqlite" else "strpos({column}, ?) > 0"
    found, args = [], []
    for column in _text_columns(conn, columns):
        for needle in _needles(text):
            found.append(strpos.format(column=column))
            args.append(needle)
    return "(" + " OR ".join(found) + ")", args


NEWEST_FIRST = "ORDER BY created_at DESC, rowid DESC"


def search_page(conn: Connection, table: str, id_column: str, search: Search,
                text_columns: tuple[str, ...], limit: int,
                offset: int) -> tuple[int, list[Row], Searched | None]:
    """``(total, rows, searched)`` of ``search`` in ``table``, newest first;
    ``searched`` is None unless the search has text."""
    clause, args = _filters(conn, id_column, search)
    if search.text is None:
        total = conn.execute(f"SELECT count(*) FROM {table}{clause}", args).fetchone()[0]
        rows = conn.execute(f"SELECT * FROM {table}{clause} {NEWEST_FIRST} LIMIT ? OFFSET ?",
                            [*args, limit, offset]).fetchall()
        return int(total), rows, None
    newest = f"SELECT rowid FROM {table}{clause} {NEWEST_FIRST} LIMIT"
    window = f"{newest} {TEXT_WINDOW}"
    # One row past the window says whether it held every row: one read, not a second.
    seen = int(conn.execute(f"SELECT count(*) FROM ({newest} {TEXT_WINDOW + 1}) AS w",
                            args).fetchone()[0])
    read = min(seen, TEXT_WINDOW)
    found, text_args = _text_filter(conn, search.text, text_columns)
    matching = f"FROM {table} WHERE rowid IN ({window}) AND {found}"
    total = conn.execute(f"SELECT count(*) {matching}", [*args, *text_args]).fetchone()[0]
    rows = conn.execute(f"SELECT * {matching} {NEWEST_FIRST} LIMIT ? OFFSET ?",
                        [*args, *text_args, limit, offset]).fetchall()
    return int(total), rows, Searched(read, complete=seen <= TEXT_WINDOW)
