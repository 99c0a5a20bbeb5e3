"""Messages of the keys actor: what the HTTP layer, the server and tests may ask of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasegate.actors.checks import check_choice, check_id, check_ids, check_page, check_text
from leasegate.actors.key_views import CreatedKey, KeyRecord, KeyView
from leasegate.actors.mailbox import Ask
from leasegate.actors.pages import Page, Paged
from leasegate.errors import InvalidRequest

Role = Literal["client", "worker", "admin"]


@dataclass(frozen=True)
class CreateKey(Ask[CreatedKey]):
    """A new key. A client key needs a tenant; sites are for worker keys."""

    role: Role
    name: str
    tenant: str | None = None
    sites: tuple[str, ...] | None = None

    def check(self) -> None:
        check_choice("role", self.role, Role)
        check_text("name", self.name, most=128, empty=False)
        check_id("tenant", self.tenant, optional=True)
        check_ids("sites", self.sites)
        if self.role == "client" and self.tenant is None:
            raise InvalidRequest("a client key needs a tenant")
        if self.role != "worker" and self.sites is not None:
            raise InvalidRequest("sites are for worker keys")


@dataclass(frozen=True)
class LookupKey(Ask[KeyRecord | None]):
    """The key with this id (revoked ones too), or None."""

    key_id: str

    def check(self) -> None:
        check_text("key_id", self.key_id, most=64, empty=False)


@dataclass(frozen=True)
class ListKeys(Ask[Paged[KeyView]]):
    page: Page = Page()

    def check(self) -> None:
        check_page(self.page)


@dataclass(frozen=True)
class RevokeKey(Ask[KeyView]):
    key_id: str

    def check(self) -> None:
        check_id("key_id", self.key_id)


@dataclass(frozen=True)
class CountKeys(Ask[int]):
    """The number of keys ever created (revoked ones too)."""
