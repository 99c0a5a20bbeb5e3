"""Artifact uploads being received at once: per worker key and in all.

Each upload holds a staging file and a stream to the disk for as long as its body
arrives. Past ``max_uploads_per_key`` for its key, or ``max_uploads`` in all (0: no
bound), a new one is 429 (4290) at once, before its body is read, with
``Retry-After``::

    slots = UploadSlots(per_key=4, total=16)
    with slots.hold(key_id):     # RateLimited past a bound
        ...                      # receive the body, record the artifact

Places are counted only while held (a cancelled upload leaves its ``with``); a key
holding none takes no memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from leasegate.errors import RateLimited

# Uploads take seconds, not minutes (a body that takes longer than http_body_timeout
# is cut); a second is when to look again.
RETRY_AFTER = "1"


class UploadSlots:
    def __init__(self, per_key: int, total: int) -> None:
        self.per_key = per_key
        self.total = total
        self._by_key: dict[str, int] = {}
        self.held = 0

    @contextlib.contextmanager
    def hold(self, key_id: str) -> Iterator[None]:
        """Hold a place for an upload of ``key_id`` while inside; raises the 429
        (:class:`RateLimited`) if either bound is reached."""
        if self.total and self.held >= self.total:
            raise RateLimited(f"the gateway is receiving {self.total} artifact uploads, the "
                              "most it takes at once (max_uploads): retry shortly",
                              Retry_After=RETRY_AFTER)
        held = self._by_key.get(key_id, 0)
        if self.per_key and held >= self.per_key:
            raise RateLimited(f"this key is sending {self.per_key} artifact uploads, the "
                              "most one key may send at once (max_uploads_per_key): retry "
                              "once one has ended", Retry_After=RETRY_AFTER)
        self._by_key[key_id] = held + 1
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1
            left = self._by_key[key_id] - 1
            if left:
                self._by_key[key_id] = left
            else:
                del self._by_key[key_id]
