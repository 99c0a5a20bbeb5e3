"""Waiting requests: FIFO queues keyed by what each waits for; leaving is O(1).

An actor keeps a request it cannot answer yet (a long-poll) with a
:class:`Wait`: the *queue* of waiters interchangeable with it (if the oldest
finds nothing in a turn, so would the others) and the *topics* whose changes
may bring it something. A turn offers work only to the queues of the topics it
touched, oldest waiter first across them, and stops a queue at its first
waiter that finds nothing: its cost follows the work found, not the number
waiting. A waiter whose caller went away leaves at once, with no turn::

    waiters = Waiters()
    eu = Wait(queue=("lease", ("eu",)), topics=(("site", "eu"),))
    waiters.add(envelope, eu)
    waiters.offer({("site", "eu")}, serve, [])   # serve(envelope) -> True if answered
    waiters.take(envelope)                       # answered: out of its queue
    waiters.leave(other)                         # its caller is gone

Threads: :meth:`offer` runs on the database thread inside a turn, while the
actor's task waits for it with :attr:`busy` set; :meth:`leave` (the callers'
side, on the trio thread) then only marks the envelope and defers the unlinking
to :meth:`settle`, so the queues never change under the reader.

A handler makes its message wait by returning :data:`NOT_YET`; what the message waits for,
and how it is served later, is said where the handler is registered
(:meth:`leasegate.actors.runtime.handlers.Handlers.may_wait`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import outcome

from leasegate.actors.runtime.mailbox import NOT_WAITING, Envelope

Serve = Callable[[Envelope[Any]], bool]
"""Answer one waiting envelope if work is there (True), or report its queue dry (False)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """What a waiting request waits for.

    ``queue``: waiters with an equal key are interchangeable (same filter); a
    turn stops offering to a queue at the first one that finds nothing.
    ``topics``: what :meth:`Waiters.offer` is called with when such work may
    have appeared (a site's new job, a job's end). No topics: offered only when
    a turn offers to everyone.
    """

    queue: Hashable
    topics: tuple[Hashable, ...] = ()


@runtime_checkable
class WakesOnly(Protocol):
    """A message that only offers work to waiting envelopes (``wakes_only`` true): the
    actor skips its turn when no waiter waits on ``topics`` (``everything``: on
    anything)."""

    topics: frozenset[Hashable]
    everything: bool


_Head = tuple[int, Hashable, Envelope[Any], Iterator[tuple[Envelope[Any], int]]]


class Waiters:
    """The waiting envelopes of one actor (see the module docstring)."""

    def __init__(self) -> None:
        self._queues: dict[Hashable, dict[Envelope[Any], int]] = {}  # envelope -> seq
        self._topics: dict[Hashable, dict[Hashable, None]] = {}  # topic -> queue keys
        self._queue_topics: dict[Hashable, tuple[Hashable, ...]] = {}
        self._seq = 0
        self._count = 0
        self._left: list[Envelope[Any]] = []
        # (deadline, seq, envelope) of waiting envelopes with a deadline; entries of
        # envelopes answered or gone stay until popped or pruned (see add).
        self._deadlines: list[tuple[float, int, Envelope[Any]]] = []
        self.busy = False  # a turn is reading the queues on the database thread

    def __len__(self) -> int:
        """Waiting envelopes whose callers still wait."""
        return self._count

    def add(self, env: Envelope[Any], wait: Wait) -> bool:
        """NotYet ``env`` at the end of its queue; False if its caller already left."""
        if env.left:
            return False
        queue = self._queues.get(wait.queue)
        if queue is None:
            queue = self._queues[wait.queue] = {}
            self._queue_topics[wait.queue] = wait.topics
            for topic in wait.topics:
                self._topics.setdefault(topic, {})[wait.queue] = None
        self._seq += 1
        queue[env] = self._seq
        env.queue = wait.queue
        self._count += 1
        if env.deadline < math.inf:
            self._prune_deadlines()
            heapq.heappush(self._deadlines, (env.deadline, self._seq, env))
        return True

    def _prune_deadlines(self) -> None:
        """Drop the stale entries (of callers answered or gone early) once they are
        most of the heap: they cost at most as much as the waiters,
        and after a flood of callers who left, their envelopes go at once, not at
        their deadlines."""
        if len(self._deadlines) > 2 * self._count + 64:
            self._deadlines = [entry for entry in self._deadlines if _waiting(entry[2])]
            heapq.heapify(self._deadlines)

    def next_deadline(self) -> float:
        """The trio time at which the earliest waiting envelope times out (inf: none)."""
        while self._deadlines and not _waiting(self._deadlines[0][2]):
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else math.inf

    def expire(self, now: float) -> list[Envelope[Any]]:
        """Take out the envelopes whose deadline is ``now`` or past; call between turns."""
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now:
            env = heapq.heappop(self._deadlines)[2]
            if _waiting(env):
                self.take(env)
                expired.append(env)
        return expired

    def leave(self, env: Envelope[Any]) -> None:
        """The caller of ``env`` stopped waiting (answered, timed out or cancelled).

        It no longer counts at once; it is unlinked now, or after the turn that
        is reading the queues. A turn does not serve it any more (a reply already
        on its way is the caller's to give back: see ``Mailbox.ask_until``).
        """
        if env.left:
            return
        env.left = True
        if env.queue is NOT_WAITING:
            return  # not waiting (yet): add() will refuse it
        self._count -= 1
        self._prune_deadlines()  # (trio's thread alone reads the heap, busy or not)
        if self.busy:
            self._left.append(env)
        else:
            self._unlink(env)

    def take(self, env: Envelope[Any]) -> None:
        """``env`` was answered by a turn: out of its queue (no-op if it never waited)."""
        if env.queue is NOT_WAITING:
            return
        if not env.left:
            self._count -= 1
        self._unlink(env)

    def settle(self) -> None:
        """After a turn: unlink the envelopes that left while it ran."""
        self.busy = False
        left, self._left = self._left, []
        for env in left:
            if env.queue is not NOT_WAITING:
                self._unlink(env)

    def waits_on(self, topics: Collection[Hashable] | None) -> bool:
        """Whether an offer of ``topics`` (None: all) could reach a waiting envelope."""
        if self._count == 0:
            return False
        return topics is None or any(topic in self._topics for topic in topics)

    def everyone(self) -> list[Envelope[Any]]:
        """Every waiting envelope still waited for, oldest first."""
        waiting = [(seq, env) for queue in self._queues.values()
                   for env, seq in queue.items() if not env.left]
        waiting.sort(key=lambda pair: pair[0])
        return [env for _, env in waiting]

    def offer(self, topics: Collection[Hashable] | None, serve: Serve,
              newcomers: list[tuple[Envelope[Any], Wait]]) -> None:
        """Offer work to the waiters of ``topics`` (None: all), oldest first.

        ``newcomers`` that began waiting in this very turn (not in a queue yet) come after
        the others, in order. A queue is not offered again in this call once one
        of its waiters found nothing.
        """
        if topics is None:
            keys: Collection[Hashable] = list(self._queues)
        else:
            keys = {key for topic in topics for key in self._topics.get(topic, ())}
        heads: list[_Head] = []
        for key in keys:
            self._push(heads, key, iter(self._queues[key].items()))
        heapq.heapify(heads)
        dry: set[Hashable] = set()
        while heads:
            _, key, env, rest = heapq.heappop(heads)
            if serve(env):
                self._push(heads, key, rest, heap=True)
            else:
                dry.add(key)
        for env, wait in newcomers:
            if env.left or wait.queue in dry:
                continue
            if topics is not None and not any(topic in topics for topic in wait.topics):
                continue
            if not serve(env):
                dry.add(wait.queue)

    @staticmethod
    def _push(heads: list[_Head], key: Hashable, rest: Iterator[tuple[Envelope[Any], int]],
              heap: bool = False) -> None:
        for env, seq in rest:
            if not env.left:
                head = (seq, key, env, rest)
                if heap:
                    heapq.heappush(heads, head)
                else:
                    heads.append(head)
                return

    def _unlink(self, env: Envelope[Any]) -> None:
        key = env.queue
        env.queue = NOT_WAITING
        queue = self._queues[key]
        del queue[env]
        if queue:
            return
        del self._queues[key]
        for topic in self._queue_topics.pop(key):
            subscribers = self._topics[topic]
            del subscribers[key]
            if not subscribers:
                del self._topics[topic]


def _waiting(env: Envelope[Any]) -> bool:
    return env.queue is not NOT_WAITING and not env.left


class NotYet:
    """The type of :data:`NOT_YET` (a handler that may wait returns ``R | NotYet``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_YET"


NOT_YET: Final = NotYet()
"""Returned by a handler to hold the reply until work appears."""

NOT_YET_OUTCOME: Final[Any] = outcome.Value(NOT_YET)
