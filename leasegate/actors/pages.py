"""List requests and their replies: ``limit``/``offset`` in, one page out.

    page = Page(limit=50, offset=0)
    Paged(items=(...), total=123, limit=50, offset=0)
    paged(sql.page(conn, page.limit, page.offset), key_view, page)   # in a handler

A list request that takes one page and nothing else is a :class:`ListPage`, as each
actor names its own::

    @dataclass(frozen=True)
    class ListKeys(ListPage[Keys, KeyView]):
        \"\"\"Every key, newest first.\"\"\"

    @KEYS.on(ListKeys)
    def list_keys(turn: Turn, m: ListKeys) -> Paged[KeyView]: ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from leasegate.actors.checks import check_id, check_int
from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import InvalidRequest
from leasegate.storage.engine import Row
from leasegate.storage.search_sql import Searched

T = TypeVar("T")

MAX_LIMIT = 500
MAX_OFFSET = 2**31 - 1


@dataclass(frozen=True)
class Page:
    """A list request: ``limit`` 1–500, ``offset`` ≥ 0 (:func:`check_page`)."""

    limit: int = 50
    offset: int = 0


@dataclass(frozen=True)
class Paged(Generic[T]):
    """One page of a list, newest first, and the total the filters match."""

    items: tuple[T, ...]
    total: int
    limit: int
    offset: int


@dataclass(frozen=True)
class JobPage(Paged[T]):
    """A page of a job search; with text, how much the search read (``searched``)."""

    searched: Searched | None = field(default=None, metadata={
        "description": "With `text`: how much was read."})


def check_page(value: object) -> None:
    if not isinstance(value, Page):
        raise InvalidRequest(f"page must be a Page (got {value!r:.40})")
    check_int("limit", value.limit, 1, MAX_LIMIT)
    check_int("offset", value.offset, 0, MAX_OFFSET)


def paged(found: tuple[int, Sequence[Row]], view: Callable[[Row], T], page: Page) -> Paged[T]:
    """A page of views from what a SQL module's page query found: (total, rows)."""
    total, rows = found
    return Paged(tuple(view(row) for row in rows), total, page.limit, page.offset)


A_contra = TypeVar("A_contra", contravariant=True)


@dataclass(frozen=True)
class ListPage(Ask[A_contra, Paged[T]]):
    """One page (``limit``/``offset``) of the actor ``A_contra``'s ``T``s."""

    page: Page = Page()

    def check(self) -> None:
        check_page(self.page)


@dataclass(frozen=True)
class TenantPage(ListPage[A_contra, T]):
    """One page of a tenant's ``T``s (``tenant`` None: every tenant's)."""

    tenant: str | None = None

    def check(self) -> None:
        super().check()
        check_id("tenant", self.tenant, optional=True)
