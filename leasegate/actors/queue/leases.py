"""Pieces of leasing both job channels share: tokens, site limits, dry filters.

    token = new_lease_token()
    check_site(row["site"], key_sites)          # 403 for another site's job
    if dry.known(turn, sites): ...              # this filter found nothing this turn
    turn.work_may_be_available(*new_work(site)) # wakes lease_wait(sites) with that site
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Hashable
from typing import Final, TypeGuard

from leasegate.actors.runtime.waiters import Wait
from leasegate.errors import Forbidden


def new_lease_token() -> str:
    return secrets.token_urlsafe(18)


def check_site(site: str, allowed: tuple[str, ...] | None) -> None:
    """A key limited to some sites may not act on another site's job (403)."""
    if allowed is not None and site not in allowed:
        raise Forbidden(f"this key may not serve site {site}")


class DryFilters:
    """Which ``sites`` filters found no work in this turn.

    Serving waiting leases only takes work within a turn, so once a lease for
    some sites found nothing, every later waiter asking for those sites (or a
    subset) would scan the queue in vain. With a backlog behind a blocked lane
    that scan is the expensive part, once per filter instead of once per waiter::

        if dry.known(self.turn, sites): return None
        ... lease ...; if nothing: dry.add(self.turn, sites)
    """

    def __init__(self) -> None:
        self._turn = -1
        self._dry: set[tuple[str, ...] | None] = set()

    def known(self, turn: int, sites: tuple[str, ...] | None) -> bool:
        if turn != self._turn:
            self._turn, self._dry = turn, set()
            return False
        if None in self._dry or sites in self._dry:
            return True
        return sites is not None and all((site,) in self._dry for site in sites)

    def found(self, turn: int, sites: tuple[str, ...] | None) -> bool:
        """:meth:`known`, without forgetting an earlier turn's filters."""
        return turn == self._turn and self.known(turn, sites)

    def add(self, turn: int, sites: tuple[str, ...] | None) -> None:
        if turn != self._turn:
            self._turn, self._dry = turn, set()
        self._dry.add(sites)
        if sites is not None:
            self._dry.update((site,) for site in sites)


# ---- what waiting requests wait for (see leasegate.actors.runtime.waiters) ----

def lease_wait(sites: tuple[str, ...] | None) -> Wait:
    """A waiting lease: queued with the leases of the same filter, woken by its sites."""
    topics = (("site", "*"),) if sites is None else tuple(("site", s) for s in sites)
    return Wait(queue=("lease", sites), topics=topics)


def new_work(site: str) -> tuple[Hashable, ...]:
    """The topics of a job that became leasable at ``site``."""
    return (("site", site), ALL_SITES)


ALL_SITES: Final = ("site", "*")


def wakes_leases(topic: Hashable) -> TypeGuard[tuple[str, str]]:
    """Whether ``topic`` is one of :func:`new_work`'s (the others name a job)."""
    return isinstance(topic, tuple) and len(topic) == 2 and topic[0] == "site"


def left_for_others(topics: Collection[Hashable], dry: DryFilters, turn: int
                    ) -> set[Hashable]:
    """Of the topics a turn woke, those other gateways' parked requests still need
    (``elsewhere``): a site where a lease parked here found nothing, after the turn's
    writes and in its transaction, has no work left that the turn made, so a lease
    parked elsewhere would find nothing there either; all sites, when one for every
    site found nothing. The other topics (a job's change) are left as they are."""
    everywhere_dry = dry.found(turn, None)
    left: set[Hashable] = set()
    sites_woken = False
    for topic in topics:
        if not wakes_leases(topic):
            left.add(topic)
        elif topic != ALL_SITES:
            sites_woken = True
            if not everywhere_dry and not dry.found(turn, (topic[1],)):
                left.update((topic, ALL_SITES))
    if ALL_SITES in topics and not sites_woken and not everywhere_dry:
        left.add(ALL_SITES)
    return left


def job_wait(job_id: str) -> Wait:
    """A waiting read of one job (``wait_seconds``), woken by :func:`job_changed`."""
    return Wait(queue=("job", job_id), topics=(job_changed(job_id),))


def job_changed(job_id: str) -> Hashable:
    """The topic of a job whose status changed (it may have settled)."""
    return ("job", job_id)
