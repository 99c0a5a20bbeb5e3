"""Rows in index order, a page at a time, and several such streams merged.

A lease reads only as many ready rows as it hands out, whatever is queued,
blocked or retained besides. It walks an index in its order with keyset
paging (``(a, b) > (last a, last b)``: every page is an index seek, never an
OFFSET), and a ``sites`` filter merges one stream per site so that each
stream is still an index range::

    rows = ordered(conn, "SELECT name, x, y FROM t", "kind = ?", ["k"], ("x", "y"), page=10)
    best = merged([stream_a, stream_b], key=lambda row: (row["x"], row["y"]))

Nothing may write to the tables read while a stream is being consumed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from leasegate.storage.engine import Connection, Row, spelling

MAX_PAGE = 512
PAGE = "{page}"
"""Where a ``select`` takes its page (``WHERE ... ORDER BY ... LIMIT ?``) when that is
not at its end: inside a subquery, so that the page is read from one table's index
before a join (the rows are then ordered by ``order`` again, outside)."""


def ordered(conn: Connection, select: str, where: str, args: Sequence[Any],
            order: Sequence[str], page: int) -> Iterator[Row]:
    """The rows of ``select WHERE where ORDER BY order``, fetched lazily (``select``
    may be spelled for each engine: ``engine.Spelled``).

    ``order`` is a list of ascending expressions, unique together, that are
    also the last columns of ``select`` (the next page starts after the last
    row's values); pages start at ``page`` rows and double up to ``MAX_PAGE``.
    A ``select`` holding :data:`PAGE` takes the page there.
    """
    select = spelling(conn, select)
    columns = ", ".join(order)
    after: list[Any] | None = None
    size = max(1, page)
    while True:
        condition, values = where, list(args)
        if after is not None:
            condition += f" AND ({columns}) > ({', '.join('?' for _ in order)})"
            values += after
        page_sql = f"WHERE {condition} ORDER BY {columns} LIMIT ?"
        sql = (select.replace(PAGE, page_sql) + f" ORDER BY {columns}" if PAGE in select
               else f"{select} {page_sql}")
        rows = conn.execute(sql, [*values, size]).fetchall()
        yield from rows
        if len(rows) < size:
            return
        last = rows[-1]
        after = [last[i] for i in range(len(last) - len(order), len(last))]
        size = min(size * 2, MAX_PAGE)


def merged(streams: Iterable[Iterator[Row]],
           key: Callable[[Row], tuple[Any, ...]]) -> Iterator[Row]:
    """One stream in ``key`` order from streams each in that order."""
    return heapq.merge(*streams, key=key)
