"""Wake-ups across gateways: what one gateway's writes tell the others' parked requests.

Several gateways on one PostgreSQL database each park their own long-polls (a worker's
lease, a client's ``GET ?wait_seconds``). A queue actor's turn that makes work
available calls ``turn.work_may_be_available(topics)`` as on one gateway; with
:class:`OtherGateways` wired in, the actor's :meth:`OtherGateways.announcer` also sends those
topics to the other gateways (``NOTIFY``), once the turn has committed: never for work
that is not visible yet, nor for a rollback. Not in the turn's transaction: PostgreSQL
holds one lock for the whole server while a transaction that notified commits (its
notification queue's), so every committing turn would take turns with every other
gateway's. The topics of every turn of the last ``NOTICE_GAP_SECONDS`` go together, in
one short transaction of their own (on a connection of their own): notices grow with
time, not with jobs. Topics that wake no lease (a job's change, for a ``GET
?wait_seconds`` parked elsewhere) wait up to ``JOB_NOTICE_GAP_SECONDS`` for company:
every transition of every job names its job, and a notice a transition costs both the
sender and every listener a turn of their loops. Each gateway's listener hands the notices to
:meth:`OtherGateways.deliver`, which tells the named actor :class:`NoticedWork` through
its ref; the actor offers the work to its parked messages in a turn of its own, as if
its own write had woken them, and that turn also recomputes its timers (a claim made
on another gateway has a deadline here too). A notice never echoes back: what a
:class:`NoticedWork` wakes is not announced again (``turn.heard_elsewhere``).

A payload is small JSON, ``{"g": gateway, "a": actor, "t": [[topic...], ...]}`` (``"t":
"*"``: everything), split under PostgreSQL's 8000-byte limit, a handful per turn at
most (past that one ``"*"``). Notices of one actor are coalesced while its inbox is
busy: one message carries every topic heard since the last, so a burst costs a turn,
not a turn per notice. After the listener (re)connects, notices may have been lost:
:meth:`OtherGateways.resync` wakes everything once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio

from leasegate.actors.queue.leases import wakes_leases
from leasegate.actors.queue.reads import NoticedWork
from leasegate.actors.runtime.background import storage_failures_logged
from leasegate.actors.runtime.turn import Turn
from leasegate.errors import LeasegateError
from leasegate.logs import Throttled
from leasegate.storage.notices_sql import MAX_PAYLOAD

if TYPE_CHECKING:
    from leasegate.storage.postgres.listener import Listener

log = logging.getLogger("leasegate.gateways")

MAX_NOTICES: Final = 8  # per turn; a turn that woke more says "everything" once
# How long the notices of committed turns gather before they go, together: a wake-up
# elsewhere comes this much later, and a gateway sends at most ~100 a second.
NOTICE_GAP_SECONDS: Final = 0.01
# The same for notices that only name jobs (no lease waits on them): ~20 a second at most.
JOB_NOTICE_GAP_SECONDS: Final = 0.05


@dataclass(frozen=True)
class Notice:
    gateway: str
    actor: str
    topics: tuple[tuple[str, ...], ...]
    everything: bool


def payloads(gateway: str, actor: str, topics: Collection[Hashable],
             everything: bool) -> list[str]:
    """The notices that carry ``topics`` (each a tuple of strings; anything else, or too
    many, is said as everything)."""
    head = json.dumps({"g": gateway, "a": actor}, separators=(",", ":"))[:-1]
    whole = [f'{head},"t":"*"}}']
    if everything or not all(_is_plain(topic) for topic in topics):
        return whole
    out: list[str] = []
    room = MAX_PAYLOAD - len(head.encode()) - len(',"t":[]}')
    part: list[str] = []
    used = 0
    for topic in topics:
        text = json.dumps(topic, separators=(",", ":"))
        size = len(text.encode()) + 1
        if size > room:
            return whole
        if used + size > room:
            out.append(f'{head},"t":[{",".join(part)}]}}')
            part, used = [], 0
            if len(out) == MAX_NOTICES:
                return whole
        part.append(text)
        used += size
    if part:
        out.append(f'{head},"t":[{",".join(part)}]}}')
    return out


def _is_plain(topic: Hashable) -> bool:
    return isinstance(topic, tuple) and all(isinstance(part, str) for part in topic)


def decode(payload: str) -> Notice | None:
    """A notice, or None for a payload that is not one (another program's, or a newer
    gateway's we do not read)."""
    try:
        data: Any = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    gateway, actor, topics = data.get("g"), data.get("a"), data.get("t")
    if not (isinstance(gateway, str) and isinstance(actor, str)):
        return None
    if topics == "*":
        return Notice(gateway, actor, (), True)
    if not (isinstance(topics, list) and all(
            isinstance(t, list) and all(isinstance(p, str) for p in t) for t in topics)):
        return None
    return Notice(gateway, actor, tuple(tuple(t) for t in topics), False)


class Teller(Protocol):
    """A queue actor's ref, as far as this module uses it."""

    async def tell(self, message: NoticedWork, /) -> None: ...


@dataclass
class _Pending:
    topics: set[Hashable] = field(default_factory=set)
    everything: bool = False
    ready: trio.Event = field(default_factory=trio.Event)

    def take(self) -> NoticedWork:
        message = NoticedWork(frozenset(self.topics), self.everything)
        self.topics, self.everything, self.ready = set(), False, trio.Event()
        return message


class OtherGateways:
    """This gateway's side of the wake-ups between gateways (see the module docstring).

    ``gateway``: this gateway's id (its own notices are skipped); ``queues``: the
    actors that take :class:`NoticedWork`, by name; ``heard_any``: called on the trio
    thread for every batch of other gateways' notices, and at a resync (the live event
    stream tails the events table then); ``others``: what to call, by actor, for the
    notices of an actor that parks nothing (the keys: a revocation), and at a resync."""

    def __init__(self, gateway: str, queues: Mapping[str, Teller],
                 heard_any: Callable[[], None] = lambda: None,
                 others: Mapping[str, Callable[[], None]] | None = None) -> None:
        self.gateway = gateway
        self._queues = dict(queues)
        self._others = dict(others or {})
        self._pending = {name: _Pending() for name in queues}
        # This gateway's committed topics, by actor, until they go (see send_notices).
        self._outgoing = {name: _Pending() for name in queues}
        self._out_ready = trio.Event()
        self._urgent = trio.Event()  # a topic that wakes leases is among them
        self._send: Callable[[list[str]], Awaitable[object]] | None = None
        self._send_log = Throttled(log, 600.0)
        self._heard_any = heard_any
        self.notices = 0  # other gateways' notices heard
        self.resyncs = 0
        self._listen: Callable[[], Awaitable[None]] | None = None
        self.listener: Listener | None = None

    def listen(self, url: str, name: str, error_log_window: float,
               inline: bool = False) -> None:
        """Hear the notices on the PostgreSQL database ``url`` (a connection of its own,
        named ``name`` there) while :meth:`run` runs (``inline``: connecting on the trio
        thread, as inline storage does)."""
        from leasegate.storage.postgres.listener import Listener

        listener = Listener(url, deliver=self.deliver, resync=self.resync, name=name,
                            error_log_window=error_log_window, inline=inline)
        self.listener = listener
        self._listen = listener.run

    def send_with(self, send: Callable[[list[str]], Awaitable[object]],
                  error_log_window: float) -> None:
        """Send the notices with ``send(payloads)`` (a write of its own, committed at
        once: ``notices_sql.notify_now``) while :meth:`run` runs."""
        self._send = send
        self._send_log = Throttled(log, error_log_window)

    def announcer(self, actor: str) -> Callable[[Turn], None]:
        """What the actor ``actor`` calls before each commit (``Actor.announce``): the
        turn's topics are queued to go once it has committed, but those whose work its
        own parked requests took to the last job (``Turn.left_for_others``)."""
        outgoing = self._outgoing[actor]

        def announce(turn: Turn) -> None:
            everything = turn.announce_all
            topics = set(turn.announce) if everything else turn.left_for_others()
            if not (topics or everything):
                return
            urgent = everything or any(wakes_leases(topic) for topic in topics)

            def committed() -> None:
                outgoing.topics |= topics
                outgoing.everything = outgoing.everything or everything
                self._out_ready.set()
                if urgent:
                    self._urgent.set()

            turn.after_commit(committed)

        return announce

    async def _send_notices(self, send: Callable[[list[str]], Awaitable[object]]) -> None:
        """Every ``NOTICE_GAP_SECONDS`` at most (``JOB_NOTICE_GAP_SECONDS`` while no topic
        wakes a lease), what the committed turns woke, in one write. One that fails (the
        database unreachable) is dropped: the other gateways' deadline polls and event
        reads meet the work a moment later."""
        while True:
            await self._out_ready.wait()
            with trio.move_on_after(JOB_NOTICE_GAP_SECONDS - NOTICE_GAP_SECONDS):
                await self._urgent.wait()
            await trio.sleep(NOTICE_GAP_SECONDS)
            self._out_ready, self._urgent = trio.Event(), trio.Event()
            notices: list[str] = []
            for actor, outgoing in self._outgoing.items():
                if outgoing.topics or outgoing.everything:
                    notices += payloads(self.gateway, actor, outgoing.topics,
                                        outgoing.everything)
                    outgoing.topics, outgoing.everything = set(), False
            with storage_failures_logged(self._send_log, "notices to other gateways: "
                                         "cannot send, dropped",
                                         "notices to other gateways: sent again"):
                await send(notices)

    def deliver(self, raw: list[str]) -> None:
        """The listener's batch of payloads (on the trio thread)."""
        heard_any = False
        for payload in raw:
            notice = decode(payload)
            if notice is None or notice.gateway == self.gateway:
                continue
            other = self._others.get(notice.actor)
            if other is not None:
                other()
                continue
            heard_any = True
            self.notices += 1
            pending = self._pending.get(notice.actor)
            if pending is None:
                continue  # an actor that parks nothing here
            if notice.everything:
                pending.everything = True
            else:
                pending.topics.update(notice.topics)
            pending.ready.set()
        if heard_any:
            self._heard_any()

    def resync(self) -> None:
        """Notices may have been lost (the listener (re)connected): wake everything."""
        self.resyncs += 1
        for pending in self._pending.values():
            pending.everything = True
            pending.ready.set()
        for other in self._others.values():
            other()
        self._heard_any()

    async def run(self) -> None:
        """Forward what was heard to each actor, one message at a time per actor (the
        rest coalesces meanwhile), until cancelled."""
        async with trio.open_nursery() as nursery:
            for name, ref in self._queues.items():
                nursery.start_soon(self._forward, ref, self._pending[name])
            if self._listen is not None:
                nursery.start_soon(self._listen)
            if self._send is not None:
                nursery.start_soon(self._send_notices, self._send)

    @staticmethod
    async def _forward(ref: Teller, pending: _Pending) -> None:
        while True:
            await pending.ready.wait()
            try:
                await ref.tell(pending.take())  # waits while the inbox is full
            except LeasegateError:  # the actor stopped: the gateway is shutting down
                return
