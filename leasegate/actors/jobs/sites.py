"""The sites' dispatch controls as routes use them::

    await jobs.sites.set("shop", "pause", by="ops (k1)", reason="maintenance")
    await jobs.sites.page(Page(50, 0))      # every controlled or busy site

The task actor keeps the controls (the ``sites`` table) and applies them to its own
leases; the query actor is handed each change before the call answers, so that when
an operator reads "paused" neither channel leases the site any more. With several
gateways on one PostgreSQL database, each gateway reloads the table every
``deadline_poll_interval`` (``reload``): a change made through one is followed by all.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasegate.actors.pages import Page, Paged
from leasegate.actors.queries import QueriesRef
from leasegate.actors.queries.operator import ApplySiteControls, QueriesQueuedAt
from leasegate.actors.queries.reads import ListQuerySites
from leasegate.actors.queue.sites import Backlog, SiteBacklog, SiteControl
from leasegate.actors.runtime.batches import MAX_BATCH
from leasegate.actors.tasks import TasksRef
from leasegate.actors.tasks.operator import (
    ListSiteControls,
    ReloadSiteControls,
    SetSite,
    SiteAction,
    TasksQueuedAt,
)
from leasegate.actors.tasks.presence import ListSites
from leasegate.actors.views import Instant

BUSIEST = 500  # sites with queued work listed beside the controlled ones, per channel


@dataclass(frozen=True)
class SiteState:
    """A site as ``GET /v1/sites`` shows it."""

    site: str
    paused: bool
    leases_per_second: float | None
    queued_tasks: int
    queued_queries: int
    reason: str | None
    changed_by: str | None
    updated_at: Instant | None
    tasks: Backlog = Backlog(0, None)
    queries: Backlog = Backlog(0, None)


class Sites:
    def __init__(self, *, tasks: TasksRef, queries: QueriesRef) -> None:
        self.tasks, self.queries = tasks, queries

    async def start(self) -> None:
        """At start-up, before anything is served: the query actor gets every control."""
        controls = await self.tasks.ask(ListSiteControls())
        if controls:
            await self.queries.ask(ApplySiteControls(controls))

    async def reload(self, now: float) -> None:
        """Take what another gateway of the database set (PostgreSQL): both channels of
        this gateway follow a pause, resume or throttle made anywhere within
        ``deadline_poll_interval``."""
        controls = await self.tasks.ask(ReloadSiteControls())
        if controls:
            await self.queries.ask(ApplySiteControls(controls))

    async def paused(self) -> list[str]:
        """The paused sites, by name (for /health)."""
        return [c.site for c in await self.tasks.ask(ListSiteControls()) if c.paused]

    async def set(self, site: str, action: SiteAction, *, by: str, reason: str | None = None,
                  leases_per_second: float | None = None) -> SiteState:
        """Pause, resume or throttle ``site`` on both channels; the site as it is now."""
        control = await self.tasks.ask(SetSite(site, action, by, reason, leases_per_second))
        await self.queries.ask(ApplySiteControls((control,)))
        return (await self._states([control.site], {control.site: control}))[0]

    async def page(self, page: Page) -> Paged[SiteState]:
        """Every paused or throttled site and the busiest ones (by queued work, up to
        ``BUSIEST`` of each channel), by name."""
        controls = {c.site: c for c in await self.tasks.ask(ListSiteControls())}
        tasks = await self.tasks.ask(ListSites(Page(BUSIEST)))
        queries = await self.queries.ask(ListQuerySites(Page(BUSIEST)))
        names = sorted({*controls, *(s.site for s in tasks.items),
                        *(s.site for s in queries.items if s.queued)})
        shown = names[page.offset:page.offset + page.limit]
        return Paged(tuple(await self._states(shown, controls)), len(names), page.limit,
                     page.offset)

    async def backlogs(self, sites: list[str]) -> tuple[dict[str, SiteBacklog],
                                                        dict[str, SiteBacklog]]:
        """Queued jobs and the backlog of each of ``sites``: of tasks, of queries."""
        tasks: dict[str, SiteBacklog] = {}
        queries: dict[str, SiteBacklog] = {}
        for start in range(0, len(sites), MAX_BATCH):  # 100 sites a message
            chunk = tuple(sites[start:start + MAX_BATCH])
            tasks.update((s.site, s) for s in await self.tasks.ask(TasksQueuedAt(chunk)))
            queries.update((s.site, s) for s in await self.queries.ask(QueriesQueuedAt(chunk)))
        return tasks, queries

    async def _states(self, sites: list[str],
                      controls: dict[str, SiteControl]) -> list[SiteState]:
        if not sites:
            return []
        tasks, queries = await self.backlogs(sites)
        states = []
        for site in sites:
            c = controls.get(site, SiteControl(site))
            t, q = tasks[site], queries[site]
            states.append(SiteState(site, c.paused, c.leases_per_second, t.queued, q.queued,
                                    c.reason, c.changed_by, c.updated_at, t.backlog, q.backlog))
        return states
