"""List requests and their replies: ``limit``/``offset`` in, one page out.

    page = Page(limit=50, offset=0)
    Paged(items=(...), total=123, limit=50, offset=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from leasegate.errors import InvalidRequest

T = TypeVar("T")

MAX_LIMIT = 500
MAX_OFFSET = 2**31 - 1


@dataclass(frozen=True)
class Page:
    """A list request: ``limit`` 1–500, ``offset`` ≥ 0."""

    limit: int = 50
    offset: int = 0

    def check(self) -> None:
        if not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidRequest(f"limit must be 1-{MAX_LIMIT} (got {self.limit})")
        if not 0 <= self.offset <= MAX_OFFSET:
            raise InvalidRequest(f"offset must be 0-{MAX_OFFSET} (got {self.offset})")


@dataclass(frozen=True)
class Paged(Generic[T]):
    """One page of a list, newest first, and the total the filters match."""

    items: tuple[T, ...]
    total: int
    limit: int
    offset: int
