"""A list request that takes one page and nothing else, as each actor names its own::

    @dataclass(frozen=True)
    class ListKeys(ListPage[Keys, KeyView]):
        \"\"\"Every key, newest first.\"\"\"

    @KEYS.on(ListKeys)
    def list_keys(turn: Turn, m: ListKeys) -> Paged[KeyView]: ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from leasegate.actors.checks import check_page
from leasegate.actors.pages import Page, Paged
from leasegate.actors.runtime.mailbox import Ask

A_contra = TypeVar("A_contra", contravariant=True)
T = TypeVar("T")


@dataclass(frozen=True)
class ListPage(Ask[A_contra, Paged[T]]):
    """One page (``limit``/``offset``) of the actor ``A_contra``'s ``T``s."""

    page: Page = Page()

    def check(self) -> None:
        check_page(self.page)
