"""A search through a queue's jobs, the same on both channels: the filters a list
message carries beside its channel's own (``ListTasks``, ``ListQueries`` derive from
:class:`SearchJobs`), checked and run here (the SQL is ``storage.search_sql``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from leasegate.actors.checks import check_id, check_number, check_text
from leasegate.actors.pages import JobPage, Page, check_page
from leasegate.actors.runtime.mailbox import Ask
from leasegate.storage import search_sql
from leasegate.storage.engine import Connection, Row

A_contra = TypeVar("A_contra", contravariant=True)
V = TypeVar("V")

MAX_SEARCH_TEXT: Final = 200
"""The longest text a search looks for (characters)."""
LAST_INSTANT: Final = 2.0**40  # past any date-time either way (seconds: about 35,000 years)
# Where the text is looked for: the params, the error's message and type.
TEXT_COLUMNS: Final = ("params", "error_message", "error_type")


@dataclass(frozen=True)
class SearchJobs(Ask[A_contra, JobPage[V]]):
    """The filters a list message of either channel carries (each channel's derives
    from it and adds its own: ``ListTasks``): each None is off."""

    tenant: str | None = None
    site: str | None = None
    kind: str | None = None
    worker: str | None = None
    id_prefix: str | None = None
    since: float | None = None
    until: float | None = None
    text: str | None = None
    page: Page = Page()

    def check(self) -> None:
        for name, value in (("tenant", self.tenant), ("site", self.site),
                            ("kind", self.kind), ("worker", self.worker),
                            ("id_prefix", self.id_prefix)):
            check_id(name, value, optional=True)
        check_number("since", self.since, -LAST_INSTANT, LAST_INSTANT, optional=True)
        check_number("until", self.until, -LAST_INSTANT, LAST_INSTANT, optional=True)
        check_text("text", self.text, optional=True, most=MAX_SEARCH_TEXT, empty=False)
        check_page(self.page)


def run_search(conn: Connection, table: str, id_column: str, m: SearchJobs[Any, Any],
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
