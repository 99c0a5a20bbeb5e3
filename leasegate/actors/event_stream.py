"""The live event stream's memory: a ring of the latest job events, and its readers.

The queue actors publish each event after their commit (see
``leasegate.actors.queue.history``), so a reader never sees what was rolled back.
The ring keeps the last ``event_ring_size`` events in id order; a reader is
only a cursor into it (the id of the last event it was given) and a filter,
so a reader costs no memory of its own, however slowly it reads. A reader
whose cursor the ring has passed has missed events: it is told so
(:class:`Reset`) and goes on from now; the same for a ``Last-Event-ID`` the
ring no longer reaches, or one this gateway never handed out. Resuming is from
the ring only: after a restart the ring is empty and only the last id before
the restart still resumes; a job's durable history is ``GET .../events``.

Ids are dense and come in commit order (``leasegate.storage.events_sql``),
but two actors' after-commit effects may run in either order: an event that
arrives ahead of its predecessor waits (briefly) for it, so the ring stays in
order. A hole that does not fill within ``GAP_SECONDS`` (a commit whose
effects never ran) is skipped.

Several gateways on one PostgreSQL database: the hub is given a ``tail`` (a read of
the events table after an id) and fills the ring from the table alone, every
gateway's events in id order, but only while someone reads the stream: a stream open,
one that ended less than ``IDLE_SECONDS`` ago (an EventSource reconnects within a
second), or a ring listener. Otherwise it reads nothing, so a gateway that streams to
nobody does no work for the other gateways' jobs. The first stream after that waits
for the hub to catch up: it reads from where it stopped, or from ``capacity`` ids
below the last one handed out (``head``) when it stopped further back than that, the
ring being emptied then (an older ``Last-Event-ID`` is told it missed events, as when
the ring has passed it). A gateway starts that way too, so it waits for no
transaction at start-up. The tail hands out only ids no lower one can follow
(``events_sql.CommitOrder``: it holds back what lies behind an id still in flight,
and says so; the hub then reads again after ``HELD_BACK_SECONDS``), so a tail never
skips one, and the holes it hands out past (rolled-back ids) are never filled. A local commit's
:meth:`EventHub.publish` only says "read now" (the row comes with the others', never
twice); another gateway's commit says it through its notification
(:meth:`EventHub.poke`, from ``elsewhere.OtherGateways``); and every
``TAIL_FALLBACK_SECONDS`` the hub reads anyway, in case a notification was lost. Two
reads are at least ``TAIL_GAP_SECONDS`` apart: under load the reads grow with time,
not with commits.
A ``Last-Event-ID`` handed out by another gateway may be ahead of this one's ring
for a moment: the reader waits for one read of the table before it judges it.
This gateway's metrics (``own_listeners``) are told of its own commits' events as they
are published, not from the table: they need no order, and no read.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import trio

from leasegate.actors.channels import Channel
from leasegate.actors.runtime.background import storage_failures_logged
from leasegate.actors.views import Instant
from leasegate.errors import Unavailable
from leasegate.logs import Throttled

log = logging.getLogger("leasegate.events")

GAP_SECONDS: Final = 1.0
BATCH: Final = 500  # events one read hands a reader at most
TAIL_BATCH: Final = 1000  # rows one read of the table takes at most
TAIL_FALLBACK_SECONDS: Final = 2.0  # a tailing hub reads this often, notified or not
AHEAD_WAIT_SECONDS: Final = 1.0  # the most a reader waits for the tail to judge its id
# Events held back behind one still in flight: read again this soon (its commit's
# notice usually comes first; a rolled-back id or a transaction without events does not
# send one).
HELD_BACK_SECONDS: Final = 0.05
# The least time between two reads of the table: under load, a read per commit (and
# per notice of every other gateway) would grow with the jobs; this way it grows with
# time, each read taking what the commits of the gap left.
TAIL_GAP_SECONDS: Final = 0.01
# A tailing hub stops reading the table once no stream has been open, nor subscribed,
# for this long; the first stream after that waits (at most CATCH_UP_SECONDS) for it
# to catch up.
IDLE_SECONDS: Final = 30.0
CATCH_UP_SECONDS: Final = 10.0

@dataclass(frozen=True)
class JobEvent:
    """One thing that happened to a job; ``status`` is the job's status after it."""

    event_id: int
    channel: Channel
    job_id: str
    tenant: str
    site: str
    device_id: str | None
    kind: str
    status: str
    at: Instant
    detail: dict[str, Any]
    job_kind: str = ""  # the job's own kind (``kind`` is the event's)


Tail = Callable[[int, int], Awaitable[tuple[list[JobEvent], bool]]]
"""``tail(after, limit)``: up to ``limit`` committed events with ids above ``after``, in
id order, that no lower id can follow, and whether more are held back
(``history.committed_after``)."""
Head = Callable[[], Awaitable[int]]
"""``head()``: the last event id handed out, committed or not (``events_sql.last_event_id``)."""


@dataclass(frozen=True)
class EventFilter:
    """Which events a reader gets; ``tenant`` None: every tenant (admin)."""

    tenant: str | None = None
    job_ids: frozenset[str] = frozenset()
    site: str | None = None
    device_id: str | None = None
    channel: Channel | None = None

    def matches(self, event: JobEvent) -> bool:
        return ((self.tenant is None or event.tenant == self.tenant)
                and (not self.job_ids or event.job_id in self.job_ids)
                and (self.site is None or event.site == self.site)
                and (self.device_id is None or event.device_id == self.device_id)
                and (self.channel is None or event.channel == self.channel))


@dataclass(frozen=True)
class Reset:
    """The reader missed events (or cannot resume where it asked): re-read; the
    stream goes on from ``event_id``, the last event id as of now."""

    reason: str
    event_id: int


class EventHub:
    def __init__(self, capacity: int, max_readers: int, tail: Tail | None = None, *,
                 head: Head | None = None, error_log_window: float = 600.0) -> None:
        self.capacity = capacity
        self.max_readers = max_readers
        # One slot per id, from the oldest kept to _end: an id that never came (a hole
        # skipped, a rolled-back id on PostgreSQL) is None, so an id's slot is found
        # by arithmetic.
        self._ring: deque[JobEvent | None] = deque(maxlen=capacity)
        self._end = 0  # the id of the ring's last slot
        self._last = 0  # the id of the newest event in the ring (or before it)
        self._pending: dict[int, JobEvent] = {}
        self._gap_since: float | None = None
        self._changed = trio.Event()
        self._hole = trio.Event()  # set when a hole in the ids opens
        self.readers = 0
        self.closed = False
        # Called with each event as it enters the ring (the console's charts: every
        # gateway's events); ``own_listeners`` only with those of this gateway's own
        # commits (its metrics: summed over gateways, each counted once). A listener
        # must be quick and must not raise.
        self.listeners: list[Callable[[JobEvent], None]] = []
        self.own_listeners: list[Callable[[JobEvent], None]] = []
        # Several gateways: the ring is filled from the table (see the module docstring).
        self._tail = tail
        self._head = head
        # Tailing: whether the ring is up to date with the table (False until the first
        # read, unless start() said where the table ends, and while nobody reads).
        self.current = False
        self._touched = -math.inf  # when a reader last subscribed, waited or ended
        self._wanted = trio.Event()  # set when a reader comes to a hub that reads nothing
        self._poke = trio.Event()
        self._tailed = trio.Event()  # set once the read under way (or the next) is over
        self._tail_log = Throttled(log, error_log_window)

    @property
    def tailing(self) -> bool:
        return self._tail is not None

    @property
    def last_event_id(self) -> int:
        return self._last

    def start(self, last_event_id: int) -> None:
        """Before any event: the last id the database handed out (resumable from; none
        below it still to commit). A tailing hub need not be told: its first reader
        waits for it to catch up instead."""
        self._last = self._end = last_event_id
        self.current = True

    # ---- the writers' side (after each commit, on the trio thread) ----

    def publish(self, event: JobEvent) -> None:
        self.publish_many((event,))

    def publish_many(self, events: Iterable[JobEvent]) -> None:
        """:meth:`publish` of each of ``events`` (one commit's), the readers woken once
        for them all."""
        if self._tail is not None:  # the table brings them, in order with the others'
            for event in events:
                for listener in self.own_listeners:
                    listener(event)
            self._poke.set()
            return
        added = False
        for event in events:
            if event.event_id <= self._last:  # behind a skipped hole: too late for the ring
                log.warning("event %d came after its hole was skipped; not streamed",
                            event.event_id)
                continue
            self._pending[event.event_id] = event
            added = True
        if added:
            self._flush()

    def _flush(self) -> None:
        moved = False
        while self._last + 1 in self._pending:
            self._append(self._pending.pop(self._last + 1))
            moved = True
        if not self._pending:
            self._gap_since = None
        elif moved or self._gap_since is None:  # a new hole: its own GAP_SECONDS
            self._gap_since = trio.current_time()
            self._hole.set()
        if moved:
            self._moved()

    def _append(self, event: JobEvent) -> None:
        gap = event.event_id - self._end - 1
        if gap >= self.capacity:
            self._ring.clear()
        elif gap > 0:
            self._ring.extend(None for _ in range(gap))
        self._last = self._end = event.event_id
        self._ring.append(event)
        for listener in self.listeners:
            listener(event)
        if self._tail is None:
            for listener in self.own_listeners:
                listener(event)

    def _moved(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def poke(self) -> None:
        """Read the table now (tailing: another gateway committed events)."""
        self._poke.set()

    async def caught_up(self, wait: float) -> None:
        """Until a read of the table that begins after this call is over (at most
        ``wait`` seconds); at once when not tailing."""
        if self._tail is None:
            return
        tailed = self._tailed
        self.touch()
        self._poke.set()
        with trio.move_on_after(wait):
            await tailed.wait()

    def touch(self) -> None:
        """A reader came, waits or ended: a tailing hub reads the table (again) for at
        least ``IDLE_SECONDS``."""
        self._touched = trio.current_time()
        self._wanted.set()

    def _read_for_someone(self) -> bool:
        return bool(self.readers or self.listeners
                    or trio.current_time() < self._touched + IDLE_SECONDS)

    async def run(self) -> None:
        """Skip a hole in the ids that stays open longer than ``GAP_SECONDS``: asleep
        until a hole opens, then until its deadline (no tick). Tailing: read the
        table whenever poked, and every ``TAIL_FALLBACK_SECONDS``."""
        if self._tail is not None:
            await self._run_tail(self._tail)
            return
        while True:
            since = self._gap_since
            if since is None:
                await self._hole.wait()
                self._hole = trio.Event()
                continue
            await trio.sleep_until(since + GAP_SECONDS)
            if self._gap_since == since:  # the same hole, still open
                skipped_to = min(self._pending) - 1
                log.warning("event ids %d..%d never came; skipped", self._last + 1, skipped_to)
                self._last = skipped_to
                self._flush()

    async def _run_tail(self, tail: Tail) -> None:
        held_back = failed = False
        while True:
            await trio.sleep(TAIL_GAP_SECONDS)
            if not self._read_for_someone():
                self.current = held_back = failed = False
                self._wanted = trio.Event()
                await self._wanted.wait()
            with trio.move_on_after(HELD_BACK_SECONDS if held_back else TAIL_FALLBACK_SECONDS):
                if self.current or failed:  # else a reader waits for the catch-up
                    await self._poke.wait()
            self._poke = trio.Event()
            tailed, self._tailed = self._tailed, trio.Event()
            failed = True
            with storage_failures_logged(
                    self._tail_log, "live events: cannot read the events table, trying again",
                    "live events: reading the events table again"):
                if not self.current and self._head is not None:
                    self._skip_to(await self._head() - self.capacity)
                while True:
                    events, held_back = await tail(self._last, TAIL_BATCH)
                    for event in events:
                        if event.event_id > self._last:
                            self._append(event)
                    if events:
                        self._moved()
                    if len(events) < TAIL_BATCH or held_back:
                        break
                self.current, failed = True, False
            tailed.set()

    def _skip_to(self, event_id: int) -> None:
        """Catching up: read on from ``event_id`` if the ring stopped before it (the
        ring emptied: what lay between is not in it, nor resumable)."""
        if event_id > self._last:
            self._ring.clear()
            self._last = self._end = event_id

    def close(self) -> None:
        """End every stream (the gateway drains); new ones are refused."""
        self.closed = True
        self._changed.set()

    # ---- the readers' side ----

    def subscribe(self, wanted: EventFilter, after: int | None) -> Reader:
        """A reader of events after ``after`` (None: from now); 503 past ``max_readers``."""
        if self.closed:
            raise Unavailable("the gateway is shutting down")
        if self.readers >= self.max_readers:
            raise Unavailable(f"{self.max_readers} event streams are open; that is the "
                              "limit", Retry_After="5")
        return Reader(self, wanted, after)

    def _oldest(self) -> int:
        return self._end - len(self._ring) + 1 if self._ring else self._last + 1

    def _after(self, cursor: int) -> list[JobEvent] | None:
        """The ring's events after ``cursor``; None if some already left the ring."""
        oldest = self._oldest()
        if cursor < oldest - 1:
            return None
        start = cursor - oldest + 1
        ring = self._ring
        return [event for i in range(start, len(ring)) if (event := ring[i]) is not None]


class Reader:
    """One stream's place in the ring; counted in ``hub.readers`` while it streams."""

    def __init__(self, hub: EventHub, wanted: EventFilter, after: int | None) -> None:
        self.hub = hub
        self.wanted = wanted
        self.cursor = hub.last_event_id
        self._reset: str | None = None
        self._after = after
        self._ended = False
        self._waiting: trio.CancelScope | None = None  # while next() waits for events
        # Judged in begin(), after a read of the table: a tailing hub that is not up to
        # date (nobody read the stream a while), or an id ahead of it.
        self._deferred = hub.tailing and (not hub.current or (
            after is not None and after > hub.last_event_id))
        hub.touch()
        if after is not None and not self._deferred:
            self._resume(after)

    def _resume(self, after: int) -> None:
        hub = self.hub
        self._after = None
        oldest = hub._oldest()
        if after > hub.last_event_id:
            self._reset = (f"Last-Event-ID {after} was not handed out by this gateway "
                           f"(the latest is {hub.last_event_id}); re-read")
        elif after < oldest - 1:
            self._reset = (f"Last-Event-ID {after} is older than the events kept "
                           f"(from {oldest}); missed events, re-read")
        else:
            self.cursor = after

    async def begin(self) -> None:
        """Before the stream says where it starts (tailing): once the hub has caught up
        with the table if it had stopped reading it; and a ``Last-Event-ID`` ahead of
        this gateway's ring (another gateway handed it out) is judged after one read."""
        if self._deferred:
            self._deferred = False
            hub = self.hub
            with trio.CancelScope() as self._waiting:  # end() ends the wait too
                if not self._ended:
                    await hub.caught_up(AHEAD_WAIT_SECONDS if hub.current
                                        else CATCH_UP_SECONDS)
            self._waiting = None
            self.cursor = hub.last_event_id
            if self._after is not None:
                self._resume(self._after)

    @contextlib.contextmanager
    def streaming(self) -> Iterator[bool]:
        """Counted toward ``max_readers`` while the stream runs; False (not counted) when
        other streams reached the limit since :meth:`EventHub.subscribe` checked it."""
        hub = self.hub
        if hub.readers >= hub.max_readers:
            yield False
            return
        hub.readers += 1
        try:
            yield True
        finally:
            hub.readers -= 1
            hub.touch()

    def end(self) -> None:
        """End this stream now (its key was revoked): :meth:`next` returns None."""
        self._ended = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def next(self, wait: float) -> list[JobEvent] | Reset | None:
        """The next events for this reader, waiting up to ``wait`` seconds for some
        (an empty list when none came); a :class:`Reset`; None once the hub closed or
        :meth:`end` was called."""
        await self.begin()
        self.hub.touch()
        deadline = trio.current_time() + wait
        while True:
            if self.hub.closed or self._ended:
                return None
            if self._reset is not None:
                reason, self._reset = self._reset, None
                self.cursor = self.hub.last_event_id
                return Reset(reason, self.cursor)
            changed = self.hub._changed
            found = self.hub._after(self.cursor)
            if found is None:
                self.cursor = self.hub.last_event_id
                return Reset(f"missed events: this stream fell more than "
                             f"{self.hub.capacity} events behind; re-read", self.cursor)
            matching: list[JobEvent] = []
            for event in found:
                self.cursor = event.event_id
                if self.wanted.matches(event):
                    matching.append(event)
                    if len(matching) == BATCH:
                        break
            if matching:
                return matching
            if trio.current_time() >= deadline:
                return []
            with trio.move_on_at(deadline if math.isfinite(deadline) else math.inf
                                 ) as self._waiting:
                await changed.wait()
            self._waiting = None
