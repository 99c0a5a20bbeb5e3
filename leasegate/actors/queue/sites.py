"""Per-site dispatch control, the same on both channels: a paused site is leased on
neither, and a throttled one no faster than its ``leases_per_second``.

Each queue actor keeps a :class:`SiteGate` in its turn and asks it in the lease path::

    if not turn.sites.idle:                 # no control anywhere: nothing to ask
        sites = turn.sites.unpaused(sites)  # a worker's sites filter, paused ones out
        rows = queued(..., admit=turn.sites.admitter(now))   # one token per lease

The controls are kept in the ``sites`` table, which the task actor owns; the query
actor is handed every change (and all of them at start-up) as :class:`SiteControl`
values. A throttle is a token bucket per site (memory for throttled sites only),
holding a tenth of a second's leases (at least one), so that no second sees more than
the rate and that tenth. Each actor has its own bucket: the rate holds per channel. A
lease that found a site's bucket empty makes the actor wake when it refills
(:meth:`SiteGate.next_refill`, from the actor's deadline timer), so parked leases get
the site's work as soon as the rate allows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from leasegate.actors.checks import MAX_TEXT, check_flag, check_id, check_ids, check_text
from leasegate.actors.queue.leases import new_work
from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import InvalidRequest
from leasegate.storage.engine import Row

if TYPE_CHECKING:
    from leasegate.actors.runtime.turn import Turn

A_contra = TypeVar("A_contra", contravariant=True)

MAX_RATE = 1_000_000.0  # leases a second; beyond it a throttle throttles nothing
MAX_REASON = 500


@dataclass(frozen=True)
class SiteControl:
    """What an operator set for one site (a site without a row has neither control)."""

    site: str
    paused: bool = False
    leases_per_second: float | None = None
    reason: str | None = None
    changed_by: str | None = None
    updated_at: float | None = None


def site_control(row: Row) -> SiteControl:
    return SiteControl(row["site"], bool(row["paused"]), row["leases_per_second"],
                       row["reason"], row["changed_by"], row["updated_at"])


def check_control(control: object) -> None:
    if not isinstance(control, SiteControl):
        raise InvalidRequest("a site control must be a SiteControl")
    check_id("site", control.site)
    check_flag("paused", control.paused)
    check_rate(control.leases_per_second)
    check_text("reason", control.reason, optional=True, most=MAX_TEXT)


def check_rate(rate: object) -> None:
    if rate is None:
        return
    if (isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate)
            or not 0 < rate <= MAX_RATE):
        raise InvalidRequest(f"leases_per_second must be a number > 0 and at most "
                             f"{MAX_RATE:g}, or null (got {rate!r:.40})")


class _Bucket:
    """A token bucket: ``rate`` a second, ``capacity`` at most."""

    __slots__ = ("capacity", "last", "rate", "starved_until", "tokens")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate / 10)
        self.tokens = 1.0  # one lease at once, then the rate
        self.last = now
        self.starved_until: float | None = None

    def take(self, now: float) -> bool:
        if now > self.last:
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
            self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.starved_until = now + (1.0 - self.tokens) / self.rate
        return False


class SiteGate:
    """One queue actor's view of the site controls (see the module docstring)."""

    def __init__(self) -> None:
        self.paused: set[str] = set()
        self.rates: dict[str, float] = {}
        self._buckets: dict[str, _Bucket] = {}

    @property
    def idle(self) -> bool:
        """No site is paused or throttled: the lease path asks nothing."""
        return not self.paused and not self._buckets

    def load(self, controls: Iterable[SiteControl], now: float) -> None:
        for control in controls:
            self.apply(control, now)

    def apply(self, control: SiteControl, now: float) -> bool:
        """Take a site's controls; True when its work may be leasable now where it was
        not (resumed, or throttled otherwise)."""
        site = control.site
        was_paused, old_rate = site in self.paused, self.rates.get(site)
        if control.paused:
            self.paused.add(site)
        else:
            self.paused.discard(site)
        rate = control.leases_per_second
        if rate is None:
            self.rates.pop(site, None)
            self._buckets.pop(site, None)
        elif rate != old_rate:
            self.rates[site] = rate
            self._buckets[site] = _Bucket(rate, now)
        return not control.paused and (was_paused or rate != old_rate)

    def unpaused(self, sites: tuple[str, ...] | None) -> list[str] | None:
        """A lease's sites filter without the paused sites (None: every site)."""
        if sites is None:
            return None
        return [site for site in sites if site not in self.paused]

    def admitter(self, now: float) -> Callable[[str], bool]:
        """Whether a job of a site may be leased now; True takes one of its tokens."""
        paused, buckets = self.paused, self._buckets

        def admit(site: str) -> bool:
            if site in paused:
                return False
            bucket = buckets.get(site)
            return bucket is None or bucket.take(now)

        return admit

    def next_refill(self) -> float | None:
        """When the first site a lease found without tokens has one again."""
        due = [b.starved_until for b in self._buckets.values() if b.starved_until is not None]
        return min(due) if due else None

    def wake_refilled(self, turn: Turn, now: float) -> None:
        """Offer parked leases the sites whose tokens have come back."""
        for site, bucket in self._buckets.items():
            if bucket.starved_until is not None and bucket.starved_until <= now:
                bucket.starved_until = None
                turn.work_may_be_available(*new_work(site))


def earliest(*times: float | None) -> float | None:
    """The earliest of some deadlines (None: none)."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


# ---- what both queues answer about sites ------------------------------------------------

@dataclass(frozen=True)
class QueuedAt(Ask[A_contra, tuple[tuple[str, int], ...]], Generic[A_contra]):
    """Queued jobs of each of these sites, up to 100 (each channel names its own)."""

    sites: tuple[str, ...]

    def check(self) -> None:
        check_ids("sites", self.sites, optional=False)


def check_reason(reason: object) -> None:
    check_text("reason", reason, most=MAX_REASON, empty=False)
