"""Per-site dispatch control, the same on both channels: a paused site is leased on
neither, and a throttled one no faster than its ``leases_per_second``, counting the
leases of both channels on every gateway of the database.

Each queue actor keeps a :class:`SiteGate` in its turn and asks it in the lease path::

    if not turn.sites.idle:                 # no control anywhere: nothing to ask
        sites = turn.sites.unpaused(sites)  # a worker's sites filter, paused ones out
        admit = turn.sites.admission(conn, now)
        rows = queued(..., admit=admit)     # one token per lease
        admit.spend()                       # the tokens drawn, written back

The controls are kept in the ``sites`` table, which the task actor owns; the query
actor is handed every change (and all of them at start-up) as :class:`SiteControl`
values, and another gateway's changes reach both within ``deadline_poll_interval``.

A throttle is a token bucket per site, holding a tenth of a second's leases (at least
one), so that no second sees more than the rate and that tenth. The bucket is the
site's row (``tokens`` as of ``refilled_at``, wall time: the same for every gateway),
not an actor's memory: each lease call of either actor reads it, draws a token per
job it leases and writes it back, in its own turn's transaction, under the row locks
of the throttled sites (``operator_sql.site_buckets``, taken at a lease's first draw).
So the rate holds for tasks and queries together, whichever gateway they ask. That row
is the one the query actor writes of the task actor's table, and only its bucket's
columns, on purpose.

A lease that found a site's bucket empty makes its actor wake when a token is due
(:meth:`SiteGate.next_refill`, from the actor's deadline timer) and offer the site's
work to its waiting leases again: if the other channel (or gateway) took that token
first, they find the bucket empty and wait for the next one; if it left the token
unused, they take it. The channel that drew last (``drawn_by``) wakes a moment later
(:func:`courtesy`), so that while both wait they take the tokens in turn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from leasegate.actors.channels import Channel
from leasegate.actors.checks import MAX_TEXT, check_flag, check_id, check_ids, check_text
from leasegate.actors.queue.leases import new_work
from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import InvalidRequest
from leasegate.storage import operator_sql
from leasegate.storage.engine import Connection, Row

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


FIRST_TOKENS = 1.0  # a new bucket: one lease at once, then the rate
EARLY = 1e-6  # seconds: a token due this soon counts (float wall times are exact to ~0.3 us)


def refilled(rate: float, tokens: float | None, refilled_at: float | None,
             now: float) -> tuple[float, float]:
    """A bucket's tokens and their instant at ``now``: ``rate`` a second since
    ``refilled_at``, at most a tenth of a second's (at least one). None: a new bucket.
    A gateway whose clock is behind the last draw's adds nothing (never refills twice)."""
    if tokens is None or refilled_at is None:
        return FIRST_TOKENS, now
    if now <= refilled_at:
        return tokens, refilled_at
    return min(max(1.0, rate / 10), tokens + (now - refilled_at) * rate), now


@dataclass
class _Bucket:
    rate: float
    tokens: float
    at: float  # the tokens' instant
    ours: bool  # this channel drew from it last


def courtesy(rate: float) -> float:
    """How long the channel that drew a site's last token waits past the next one's
    due time before it takes that one too: long enough for the other channel's waiting
    leases, woken at the due time, to take it first. Else the channel whose turns
    reach the draw quicker (queries: fewer timers to run first) gets every token while
    both wait. A hundredth of a second, a tenth of a token at high rates; what it
    waits, the bucket fills on."""
    return min(0.01, 0.1 / rate)


class Admission:
    """One lease call's admission of sites (see the module docstring): a callable
    that says whether a job of a site may be leased, drawing a token of a throttled
    one; :meth:`spend` writes back the buckets it drew from."""

    def __init__(self, gate: SiteGate, conn: Connection, now: float) -> None:
        self._gate, self._conn, self._now = gate, conn, now
        self._buckets: dict[str, _Bucket | None] | None = None  # read at the first draw
        self._drawn: set[str] = set()

    def __call__(self, site: str) -> bool:
        gate = self._gate
        if site in gate.paused:
            return False
        if site not in gate.rates:
            return True
        if self._buckets is None:
            self._buckets = self._read()
        bucket = self._buckets.get(site)
        if bucket is None:
            return True
        if bucket.tokens + bucket.rate * EARLY >= 1.0:
            bucket.tokens -= 1.0
            bucket.ours = True
            self._drawn.add(site)
            return True
        due = self._now + (1.0 - bucket.tokens) / bucket.rate
        gate.starved(site, due + courtesy(bucket.rate) if bucket.ours else due)
        return False

    def _read(self) -> dict[str, _Bucket | None]:
        """Every throttled site's bucket, their rows locked at once (one statement, in
        site order): None for a site the database no longer throttles."""
        rows = operator_sql.site_buckets(self._conn, list(self._gate.rates))
        buckets: dict[str, _Bucket | None] = {}
        for site in self._gate.rates:
            row, bucket = rows.get(site), None
            # The database's rate: another gateway may have changed it since this one heard.
            if row is not None and (rate := row["leases_per_second"]) is not None:
                tokens, at = refilled(rate, row["tokens"], row["refilled_at"], self._now)
                bucket = _Bucket(rate, tokens, at, row["drawn_by"] == self._gate.channel)
            buckets[site] = bucket
        return buckets

    def spend(self) -> None:
        """Write back the tokens left in the buckets this call drew from."""
        channel = self._gate.channel
        buckets = self._buckets or {}
        drawn = [(b.tokens, b.at, channel, site) for site in sorted(self._drawn)
                 if (b := buckets.get(site)) is not None]
        if drawn:
            operator_sql.save_tokens(self._conn, drawn)
        self._drawn.clear()


class SiteGate:
    """One queue actor's view of the site controls (see the module docstring): which
    sites are paused and throttled, and when the tokens its leases found missing come
    back. The buckets themselves are rows, never here."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel  # whose draws these are
        self.paused: set[str] = set()
        self.rates: dict[str, float] = {}
        self._starved: dict[str, float] = {}  # site -> when its next token is due

    @property
    def idle(self) -> bool:
        """No site is paused or throttled: the lease path asks nothing."""
        return not self.paused and not self.rates

    def load(self, controls: Iterable[SiteControl]) -> None:
        for control in controls:
            self.apply(control)

    def apply(self, control: SiteControl) -> bool:
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
        else:
            self.rates[site] = rate
        if rate != old_rate:
            self._starved.pop(site, None)
        return not control.paused and (was_paused or rate != old_rate)

    def unpaused(self, sites: tuple[str, ...] | None) -> list[str] | None:
        """A lease's sites filter without the paused sites (None: every site)."""
        if sites is None:
            return None
        return [site for site in sites if site not in self.paused]

    def admission(self, conn: Connection, now: float) -> Admission:
        """What admits the jobs of one lease call, in its turn (see :class:`Admission`)."""
        return Admission(self, conn, now)

    def starved(self, site: str, until: float) -> None:
        """A lease found no token of ``site``: offer its work again at ``until``."""
        self._starved[site] = until

    def next_refill(self) -> float | None:
        """When the first site a lease found without tokens has one again."""
        return min(self._starved.values()) if self._starved else None

    def wake_refilled(self, turn: Turn, now: float) -> None:
        """Offer waiting leases the sites whose tokens have come back."""
        due = [site for site, at in self._starved.items() if at <= now + EARLY]
        for site in due:
            del self._starved[site]
            turn.work_may_be_available(*new_work(site))


def earliest(*times: float | None) -> float | None:
    """The earliest of some deadlines (None: none)."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


# ---- what both queues answer about sites ------------------------------------------------

@dataclass(frozen=True)
class Backlog:
    """A site's jobs of one channel that a lease could take now (pause and throttle
    aside), and how long the oldest of them has been leasable (None: there is none)."""

    __pydantic_config__ = {"json_schema_extra": {"description": (  # /openapi.json's
        "Jobs a lease could take now (pause and throttle aside; tasks: one per free "
        "lane), and the age of the oldest since it became leasable.")}}

    leasable: int
    oldest_leasable_age_seconds: float | None


def backlog(leasable: int, since: float | None, now: float) -> Backlog:
    """The backlog of ``leasable`` jobs, the oldest leasable ``since`` (wall seconds)."""
    age = None if since is None else round(max(0.0, now - since), 3)
    return Backlog(leasable, age)


@dataclass(frozen=True)
class SiteBacklog:
    """A site's queued jobs of one channel, and its backlog."""

    site: str
    queued: int
    backlog: Backlog


@dataclass(frozen=True)
class QueuedAt(Ask[A_contra, tuple[SiteBacklog, ...]], Generic[A_contra]):
    """Queued jobs and the backlog of each of these sites, up to 100 (each channel names
    its own)."""

    sites: tuple[str, ...]

    def check(self) -> None:
        check_ids("sites", self.sites, optional=False)


def backlogs(turn: Turn, channel: str, sites: tuple[str, ...],
             leasable: Callable[[Connection, str], tuple[int, float | None]],
             ) -> tuple[SiteBacklog, ...]:
    """A channel's answer to :class:`QueuedAt`: its queued jobs of each site (on the
    queued-by-site indexes) and the backlog ``leasable`` finds (a count, and since when
    the oldest waits)."""
    counts = operator_sql.queued_by_site(turn.conn, channel, list(sites))
    return tuple(SiteBacklog(site, counts.get(site, 0),
                             backlog(*leasable(turn.conn, site), turn.now)) for site in sites)


def check_reason(reason: object) -> None:
    check_text("reason", reason, most=MAX_REASON, empty=False)
