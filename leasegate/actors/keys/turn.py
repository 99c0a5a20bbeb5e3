"""The keys actor's turn context and handler registry."""

from __future__ import annotations

from collections.abc import Callable

from leasegate.actors.keys import Keys
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.turn import Turn

Revoked = Callable[[tuple[str, ...]], None]
"""Told the ids of keys just revoked, on the trio thread after the commit that revoked
them or that found them revoked (by another process); quick, and never raising."""


class KeysTurn(Turn):
    """Beyond its table, the keys actor keeps the number of the last revocation it has
    passed on (see ``storage/keys_sql.revoked_after``) and who it passes them to."""

    def __init__(self) -> None:
        super().__init__("keys")
        self.revocations_seen = 0
        self.on_revoked: list[Revoked] = []

    def revoked(self, key_ids: tuple[str, ...], seq: int) -> None:
        """After the commit: revocations up to ``seq`` are passed on, these among them."""
        self.revocations_seen = max(self.revocations_seen, seq)
        for listener in self.on_revoked:
            listener(key_ids)


KEYS = Handlers(Keys, KeysTurn)
"""What the keys actor does with each message (filled in by ``records.py``)."""
