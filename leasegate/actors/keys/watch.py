"""Revocations made outside this gateway's keys actor, brought to it: by
``leasegate keys revoke`` (another process, writing the database directly) or, on
PostgreSQL, by another gateway.

Each revocation is numbered in commit order (``keys_sql.revoke``), so one indexed read
finds those this gateway has not passed on yet (:class:`~leasegate.actors.keys.records.
CheckRevocations`). On PostgreSQL a revocation's notification pokes the watch at once
(and a listener that reconnects pokes it too: notifications may have been lost
meanwhile); on SQLite, where no process can tell another, it reads every ``every``
seconds (``key_revocation_poll_interval``)::

    watch = RevocationWatch(keys, every=0.5)
    nursery.start_soon(serve_guarded, watch.record, clock, window, watch.check_next)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from leasegate.actors.keys import KeysRef
from leasegate.actors.keys.records import CheckRevocations
from leasegate.actors.runtime.periodic import JobRecord


class RevocationWatch:
    def __init__(self, keys: KeysRef, every: float = math.inf,
                 changed: Callable[[], bool] = lambda: True) -> None:
        self.keys = keys
        self.every = every  # infinite: when poked only
        # Whether the database may have changed since the last look (SQLite: its WAL
        # file's state). A look is a keys-actor turn, whose commit is synced: an idle
        # gateway skips it rather than sync the disk twice a second for nothing.
        self._changed = changed
        # A service (never overdue): on PostgreSQL it runs when poked.
        self.record = JobRecord("revocations", owner="keys", every=math.inf)
        self._poke = trio.Event()

    def poke(self) -> None:
        """Look now (a revocation was notified, or notifications may have been lost)."""
        self._poke.set()

    async def check_next(self) -> bool:
        """Wait to be poked (at most ``every`` seconds), then pass on what was revoked."""
        with trio.move_on_after(self.every):
            await self._poke.wait()
        poked, self._poke = self._poke.is_set(), trio.Event()  # a poke now is for the next
        if poked or self._changed():
            await self.keys.ask(CheckRevocations())
        return True
