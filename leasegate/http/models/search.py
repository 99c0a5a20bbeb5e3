"""The query string of a job search (``GET /v1/tasks``, ``GET /v1/queries``, and the
console's lists read it the same way)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from leasegate.actors.queries.reads import QueryStatus
from leasegate.actors.queue.search import MAX_SEARCH_TEXT
from leasegate.actors.tasks.reads import TaskStatus
from leasegate.http.models.jobs import NO_NUL_PATTERN, DateTime, Id, ListArgs


class SearchArgs(ListArgs):
    """The search both channels share; every filter given must match. Anything else
    in the query string is a 400."""

    site: Id | None = Field(default=None, description="Only jobs of this site.")
    kind: Id | None = Field(default=None, description="Only jobs of this kind.")
    tenant: Id | None = Field(default=None, description=(
        "Admin: that tenant's jobs. A client sees its own tenant's only (another "
        "tenant: an empty page)."))
    worker: Id | None = Field(default=None, description="The worker of the last lease.")
    id_prefix: Id | None = Field(default=None, description="Ids that start with this.")
    since: DateTime | None = Field(default=None, description="Created at or after.")
    until: DateTime | None = Field(default=None, description="Created before.")
    text: Annotated[str, StringConstraints(min_length=1, max_length=MAX_SEARCH_TEXT,
                                           pattern=NO_NUL_PATTERN)] | None = Field(
        default=None, description=(
            "Text inside the params or the error (message or type), ASCII letters in "
            "either case. Reads at most the newest 10,000 jobs that match the other "
            "filters: the reply's `searched` says how many it read and whether that "
            "was all of them."))


class QueryListArgs(SearchArgs):
    status: QueryStatus | None = Field(default=None, description="Only queries in this "
                                                                 "status.")


class TaskListArgs(SearchArgs):
    status: TaskStatus | None = Field(default=None, description="Only tasks in this status.")
    account: Id | None = Field(default=None, description="Only tasks of this account.")
