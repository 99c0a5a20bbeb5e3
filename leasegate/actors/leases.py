"""Pieces of leasing both job channels share: tokens, site limits, dry filters.

    token = new_lease_token()
    check_site(row["site"], key_sites)          # 403 for another site's job
    if dry.known(turn, sites): ...              # this filter found nothing this turn
"""

from __future__ import annotations

import secrets

from leasegate.errors import Forbidden


def new_lease_token() -> str:
    return secrets.token_urlsafe(18)


def check_site(site: str, allowed: tuple[str, ...] | None) -> None:
    """A key limited to some sites may not act on another site's job (403)."""
    if allowed is not None and site not in allowed:
        raise Forbidden(f"this key may not serve site {site}")


class DryFilters:
    """Which ``sites`` filters found no work in this turn.

    Serving parked leases only takes work within a turn, so once a lease for
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

    def add(self, turn: int, sites: tuple[str, ...] | None) -> None:
        if turn != self._turn:
            self._turn, self._dry = turn, set()
        self._dry.add(sites)
        if sites is not None:
            self._dry.update((site,) for site in sites)
