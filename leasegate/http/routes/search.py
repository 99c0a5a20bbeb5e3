"""A job search from a query string to a list message, for the API's lists and the
console's alike: the filters both channels share, and who may see what."""

from __future__ import annotations

from typing import Any

from leasegate.actors.pages import JobPage, Page
from leasegate.http.models.search import SearchArgs


def search_fields(args: SearchArgs, scope: str | None, page: Page) -> dict[str, Any] | None:
    """The list message's fields of ``args``, seen by a caller whose jobs are
    ``scope``'s (a client's tenant; None: an admin, every tenant); None when the
    caller may see nothing of what it asks (a client naming another tenant)."""
    if scope is not None and args.tenant not in (None, scope):
        return None
    return {"tenant": scope or args.tenant, "site": args.site, "kind": args.kind,
            "worker": args.worker, "id_prefix": args.id_prefix,
            "since": args.since.timestamp() if args.since else None,
            "until": args.until.timestamp() if args.until else None,
            "text": args.text, "page": page}


def nothing(page: Page) -> JobPage[Any]:
    """The empty page of a search that may see nothing."""
    return JobPage((), 0, page.limit, page.offset)
