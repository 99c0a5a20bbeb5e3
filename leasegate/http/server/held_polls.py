"""Waiting long-polls per API key and per client address: what one caller may hold open.

A waiting poll (a lease poll with ``wait_seconds``, a ``GET`` of a task or query with
``wait_seconds``, a live event stream) holds a connection, a task and its frames
for up to ``max_wait_seconds``. Past ``max_parked_per_key`` polls for its key, or
``max_parked_per_address`` for its address (0: no bound), a new one is 429 (4290)
at once, before it parks, with ``Retry-After`` (the seconds until the oldest poll
that caller holds runs out, when a place is free at the latest) and
``Connection: close``::

    polls = WaitingPolls(per_key=1000, per_address=2000)
    with polls.hold(key_id, address, seconds=30):   # RateLimited past a bound
        ...                                          # park
    with polls.holding(key_id, address, 30, reader.end) as held:  # False past a bound
        ...                                                   # stream
    polls.end_for_key(key_id)                     # revoked: its polls and streams end

Places are counted only while held, so nothing is left behind by a caller that
leaves (a cancelled poll leaves its ``with``); a key or address holding none
takes no memory.

A revoked key's polls end at once (:meth:`WaitingPolls.end_for_key`): a poll held
with ``hold`` is cancelled (a lease already on its way is given back, as when its
client leaves) and answers 401; a stream held with ``holding`` is told through its
``end`` and ends. A poll of that key that parks later (authenticated just before the
revocation) is refused as it starts waiting.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TypeVar

import trio

from leasegate.errors import LeasegateError, RateLimited, Unauthorized
from leasegate.http.server.auth import INVALID_KEY, REVOKED_KEY

# One caller's polls: a place's number -> when that poll runs out, oldest first.
_Places = dict[int, float]

T = TypeVar("T")

# Keys revoked while this process ran, remembered to refuse a poll authenticated just
# before its key's revocation that parks after it; bounded (revocations are an admin's,
# and that race is seconds long): the oldest forgotten first.
REMEMBERED_REVOCATIONS = 4096


class WaitingPolls:
    def __init__(self, per_key: int, per_address: int) -> None:
        self.per_key = per_key
        self.per_address = per_address
        self._by_key: dict[str, _Places] = {}
        self._by_address: dict[str, _Places] = {}
        self._ends: dict[str, dict[int, Callable[[], None]]] = {}  # by key: how each ends
        self._revoked: OrderedDict[str, None] = OrderedDict()
        self._numbers = itertools.count()
        self.held = 0  # places held now, in all (for /metrics)
        self.refused = 0  # polls refused since start (for /metrics)

    def refusal(self, key_id: str, address: str) -> LeasegateError | None:
        """The 429 a new poll of ``key_id`` from ``address`` gets now, or None."""
        for places, bound, whose in ((self._by_key.get(key_id), self.per_key, "this key"),
                                     (self._by_address.get(address), self.per_address,
                                      "this address")):
            if bound and places is not None and len(places) >= bound:
                oldest_ends = next(iter(places.values()))
                wait = max(1, math.ceil(oldest_ends - trio.current_time()))
                # Closed after the answer: a caller this far over holds connections
                # enough, and a flood of them is memory the process may not get back.
                return RateLimited(
                    f"{whose} holds {bound} waiting long-polls (lease polls, waits and event "
                    "streams); that is the limit: retry once one has ended",
                    Retry_After=str(wait), Connection="close")
        return None

    @contextlib.contextmanager
    def holding(self, key_id: str, address: str, seconds: float,
                end: Callable[[], None]) -> Iterator[bool]:
        """Hold a place for a stream of up to ``seconds`` while inside; False (nothing
        held) if either bound is reached or the key was revoked. ``end()`` is called
        if the key is revoked meanwhile: the stream must then end at once."""
        if key_id in self._revoked:
            yield False
            return
        if self.refusal(key_id, address) is not None:
            self.refused += 1
            yield False
            return
        with self._place(key_id, address, seconds, end):
            yield True

    @contextlib.contextmanager
    def hold(self, key_id: str, address: str, seconds: float) -> Iterator[None]:
        """Hold a place for a poll of up to ``seconds`` while inside; raises the 429
        (:class:`RateLimited`) if either bound is reached, and the 401
        (:class:`Unauthorized`) if the key is revoked, before or while it waits."""
        if key_id in self._revoked:
            raise Unauthorized(REVOKED_KEY, WWW_Authenticate=INVALID_KEY)
        self.check(key_id, address)
        with trio.CancelScope() as waiting, self._place(key_id, address, seconds,
                                                        waiting.cancel):
            yield
        if waiting.cancelled_caught:
            raise Unauthorized(REVOKED_KEY, WWW_Authenticate=INVALID_KEY)

    def end_for_key(self, key_id: str) -> None:
        """The key was revoked: end every poll and stream it holds, and refuse those it
        may still try to park."""
        self._revoked[key_id] = None
        self._revoked.move_to_end(key_id)
        while len(self._revoked) > REMEMBERED_REVOCATIONS:
            self._revoked.popitem(last=False)
        for end in list(self._ends.get(key_id, {}).values()):
            end()

    def check(self, key_id: str, address: str) -> None:
        """Raise the 429 a new poll of ``key_id`` from ``address`` gets now, if any."""
        refused = self.refusal(key_id, address)
        if refused is not None:
            self.refused += 1
            raise refused

    @contextlib.contextmanager
    def _place(self, key_id: str, address: str, seconds: float,
               end: Callable[[], None]) -> Iterator[None]:
        number = next(self._numbers)
        ends = trio.current_time() + seconds
        self._by_key.setdefault(key_id, {})[number] = ends
        self._by_address.setdefault(address, {})[number] = ends
        self._ends.setdefault(key_id, {})[number] = end
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1
            _leave(self._by_key, key_id, number)
            _leave(self._by_address, address, number)
            _leave(self._ends, key_id, number)


def _leave(holders: dict[str, dict[int, T]], holder: str, number: int) -> None:
    places = holders[holder]
    del places[number]
    if not places:
        del holders[holder]
