"""A search through a queue's jobs, the same on both channels: the filters a list
message carries beside its channel's own (``ListTasks``, ``ListQueries``), checked and
run here (the SQL is ``storage.search_sql``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

from leasegate.actors.checks import check_id, check_number, check_page, check_text
from leasegate.actors.pages import JobPage, Page
from leasegate.storage import search_sql
from leasegate.storage.engine import Connection, Row

V = TypeVar("V")

MAX_SEARCH_TEXT: Final = 200
"""The longest text a search looks for (characters)."""
LAST_INSTANT: Final = 2.0**40  # past any date-time either way (seconds: about 35,000 years)
# Where the text is looked for: the params, the error's message and type.
TEXT_COLUMNS: Final = ("params", "error_message", "error_type")


class SearchFields(Protocol):
    """The filters a list message of either channel carries."""

    @property
    def tenant(self) -> str | None: ...
    @property
    def site(self) -> str | None: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def worker(self) -> str | None: ...
    @property
    def id_prefix(self) -> str | None: ...
    @property
    def since(self) -> float | None: ...
    @property
    def until(self) -> float | None: ...
    @property
    def text(self) -> str | None: ...
    @property
    def page(self) -> Page: ...


def check_search(m: SearchFields) -> None:
    for name, value in (("tenant", m.tenant), ("site", m.site), ("kind", m.kind),
                        ("worker", m.worker), ("id_prefix", m.id_prefix)):
        check_id(name, value, optional=True)
    check_number("since", m.since, -LAST_INSTANT, LAST_INSTANT, optional=True)
    check_number("until", m.until, -LAST_INSTANT, LAST_INSTANT, optional=True)
    check_text("text", m.text, optional=True, most=MAX_SEARCH_TEXT, empty=False)
    check_page(m.page)


def run_search(conn: Connection, table: str, id_column: str, m: SearchFields,
               equal: dict[str, Any], view: Callable[[Row], V]) -> JobPage[V]:
    """One page of ``m``'s search in ``table`` (``equal``: the channel's own filters by
    column, beside the shared ones)."""
    search = search_sql.Search(
        equal={"tenant": m.tenant, "site": m.site, "kind": m.kind, "lease_owner": m.worker,
               **equal},
        id_prefix=m.id_prefix, since=m.since, until=m.until, text=m.text)
    total, rows, searched = search_sql.search_page(conn, table, id_column, search,
                                                   TEXT_COLUMNS, m.page.limit, m.page.offset)
    return JobPage(tuple(view(row) for row in rows), total, m.page.limit, m.page.offset,
                   searched)
