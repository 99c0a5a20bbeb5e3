"""Console sign-ins: a random session id in an HttpOnly, SameSite=Strict cookie,
mapped here to the admin key's id and a CSRF token.

Kept in memory (a restart signs everyone out), at most ``CAPACITY`` sessions
(the oldest goes first), each for ``LIFETIME`` seconds from sign-in. The key is
looked up again on each request (``Authenticator.session_principal``), so a
revoked key ends its sessions on their next request.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from leasegate.clock import Clock

COOKIE = "leasegate_console"
CAPACITY = 1000
LIFETIME = 8 * 3600.0
# Notices waiting for the next page of a session (after a form's redirect).
MAX_NOTICES = 5
MAX_KEPT_FIELDS = 20
MAX_KEPT_CHARS = 2000


@dataclass
class Session:
    key_id: str
    csrf: str
    expires_at: float
    # (kind, text) shown once on the next page: "ok", "error" or "secret".
    notices: list[tuple[str, str]] = field(default_factory=list)
    # The last refused form, for the next page to show it again: its action, the
    # values sent (each field cut to MAX_KEPT_CHARS) and why it was refused.
    refused: dict[str, Any] | None = None

    def refuse(self, action: str, values: dict[str, str], message: str) -> None:
        kept = dict(list(values.items())[:MAX_KEPT_FIELDS])
        self.refused = {"action": action, "message": message,
                        "values": {k[:100]: v[:MAX_KEPT_CHARS] for k, v in kept.items()}}

    def take_refused(self) -> dict[str, Any] | None:
        taken, self.refused = self.refused, None
        return taken

    def notify(self, kind: str, text: str) -> None:
        del self.notices[:-MAX_NOTICES + 1]
        self.notices.append((kind, text))

    def take_notices(self) -> list[tuple[str, str]]:
        taken, self.notices = self.notices, []
        return taken


class Sessions:
    def __init__(self, clock: Clock, capacity: int = CAPACITY,
                 lifetime: float = LIFETIME) -> None:
        self.clock = clock
        self.capacity = capacity
        self.lifetime = lifetime
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def begin(self, key_id: str) -> tuple[str, Session]:
        """A new session for ``key_id``: its id (the cookie's value) and itself."""
        now = self.clock.now()
        while self._by_id and next(iter(self._by_id.values())).expires_at <= now:
            self._by_id.popitem(last=False)  # in order of sign-in, so of expiry
        while len(self._by_id) >= self.capacity:
            self._by_id.popitem(last=False)
        session_id = secrets.token_urlsafe(32)
        session = self._by_id[session_id] = Session(
            key_id, secrets.token_urlsafe(32), now + self.lifetime)
        return session_id, session

    def find(self, session_id: str) -> Session | None:
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if session.expires_at <= self.clock.now():
            del self._by_id[session_id]
            return None
        return session

    def key_id_of(self, session_id: str) -> str | None:
        session = self.find(session_id)
        return None if session is None else session.key_id

    def end(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)

    def end_for_key(self, key_id: str) -> None:
        for session_id in [s for s, found in self._by_id.items() if found.key_id == key_id]:
            del self._by_id[session_id]
