"""Authentication, roles and rate limits for each request.

``Authorization: Bearer lg_<key_id>_<secret>``. The key is found by id and
its secret compared in constant time. A verified key is kept in memory for
``VERIFIED_SECONDS`` (at most ``VERIFIED_KEYS`` of them, the least recently
used forgotten first), so a request costs no lookup; a revocation drops the
entry when the keys actor passes it on (``System.on_key_revoked``: at once for
one through this gateway, within a second for one by the CLI or another
gateway), so it takes effect on the next request, and any other change to a key
(a restored backup) within ``VERIFIED_SECONDS``. Only keys that passed the check
are kept: invented keys cannot grow it. Missing or unknown: 401 (4010), revoked:
401 saying so (to the holder of its secret only); every 401 carries
``WWW-Authenticate: Bearer``. Known but the wrong role or site: 403 (4030).

What a caller can do without a key we already know (no key, an unknown key
id, a wrong secret, a public route) is paid for by its client address:
``address_rate_limit_*``, 429 past it, checked before any database lookup.
An unknown key id is remembered for ``UNKNOWN_KEY_SECONDS`` so that repeating
it costs no lookup either.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import NoReturn, TypeVar

from quart import Request, g, request

from leasegate.actors.keys.records import LookupKey
from leasegate.actors.keys.views import KeyRecord, Principal
from leasegate.errors import Forbidden, RateLimited, Unauthorized
from leasegate.http.console.sessions import COOKIE, Sessions
from leasegate.http.server.context import header as gateway_header
from leasegate.http.server.limits import RateLimiter, address_key
from leasegate.ids import secret_matches, split_key
from leasegate.system import System

F = TypeVar("F", bound=Callable[..., object])

SUBMITTER_ONLY = "submitting needs a client key: work belongs to a tenant"
REVOKED_KEY = "this API key was revoked"
UNKNOWN_KEY = "unknown API key"
# Every 401 says how to authenticate (RFC 7235); one for a key that was given but is no
# good says so too (RFC 6750's invalid_token), so that a client stops retrying it.
BEARER = 'Bearer realm="leasegate"'
INVALID_KEY = 'Bearer realm="leasegate", error="invalid_token"'

ADDRESS_BUCKETS = 10_000
UNKNOWN_KEY_SECONDS = 5.0
UNKNOWN_KEYS = 10_000
VERIFIED_SECONDS = 60.0
VERIFIED_KEYS = 4096


def client_address() -> str:
    """The caller's address as the per-address limits count it (IPv6: its /64)."""
    client = request.scope.get("client")
    return address_key(client[0] if client else "")


class RecentlyUnknown:
    """Key ids the database did not know, each for ``seconds``; at most ``capacity``
    of them (the oldest forgotten first): a flood of invented ids costs one lookup
    per id, not one per request."""

    def __init__(self, seconds: float = UNKNOWN_KEY_SECONDS,
                 capacity: int = UNKNOWN_KEYS) -> None:
        self.seconds = seconds
        self.capacity = capacity
        self._until: OrderedDict[str, float] = OrderedDict()

    def __contains__(self, key_id: str) -> bool:
        return key_id in self._until

    def holds(self, key_id: str, now: float) -> bool:
        until = self._until.get(key_id)
        if until is None:
            return False
        if until <= now:
            del self._until[key_id]
            return False
        return True

    def add(self, key_id: str, now: float) -> None:
        self._until.pop(key_id, None)
        while len(self._until) >= self.capacity:
            self._until.popitem(last=False)
        self._until[key_id] = now + self.seconds

    def discard(self, key_id: str) -> None:
        self._until.pop(key_id, None)

    def sweep(self, now: float) -> None:
        while self._until and next(iter(self._until.values())) <= now:
            self._until.popitem(last=False)


class VerifiedKeys:
    """Keys whose secret matched, by key id: the principal, the secret's hash (each
    request's secret is still compared with it) and until when the entry holds. At
    most ``capacity``, least recently used forgotten first."""

    def __init__(self, seconds: float = VERIFIED_SECONDS,
                 capacity: int = VERIFIED_KEYS) -> None:
        self.seconds = seconds
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[Principal, str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key_id: str, now: float) -> tuple[Principal, str] | None:
        entry = self._entries.get(key_id)
        if entry is None:
            return None
        principal, secret_hash, until = entry
        if until <= now:
            del self._entries[key_id]
            return None
        self._entries.move_to_end(key_id)
        return principal, secret_hash

    def add(self, principal: Principal, secret_hash: str, now: float) -> None:
        self._entries.pop(principal.key_id, None)
        while len(self._entries) >= self.capacity:
            self._entries.popitem(last=False)
        self._entries[principal.key_id] = (principal, secret_hash, now + self.seconds)

    def discard(self, key_id: str) -> None:
        self._entries.pop(key_id, None)

    def sweep(self, now: float) -> None:
        for key_id in [k for k, (_, _, until) in self._entries.items() if until <= now]:
            del self._entries[key_id]


class Authenticator:
    def __init__(self, system: System) -> None:
        self.system = system
        self.verified = VerifiedKeys()
        self._forgotten = 0  # counts revocations: a lookup that straddles one is not kept
        settings = system.settings
        self.limiter = RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst)
        self.address_limiter = RateLimiter(settings.address_rate_limit_per_second,
                                           settings.address_rate_limit_burst, ADDRESS_BUCKETS)
        self.unknown = RecentlyUnknown()
        self.sessions = Sessions(system.clock)  # the console's sign-ins

    def forget(self, key_id: str) -> None:
        """A key was revoked: nothing remembered of it stands, console sessions included."""
        self._forgotten += 1
        self.verified.discard(key_id)
        self.unknown.discard(key_id)
        self.sessions.end_for_key(key_id)

    def sweep(self, now: float) -> None:
        self.verified.sweep(now)
        self.limiter.sweep(now)
        self.address_limiter.sweep(now)
        self.unknown.sweep(now)

    def charge_address(self) -> None:
        """Take a token from the caller's address; 429 when it has none left."""
        wait = self.address_limiter.take(client_address(), self.system.clock.now())
        if wait > 0:
            raise RateLimited("too many requests without a valid key from this address",
                              Retry_After=str(max(1, int(wait + 0.999))))

    def _refuse(self, message: str, challenge: str = BEARER) -> NoReturn:
        self.charge_address()
        raise Unauthorized(message, WWW_Authenticate=challenge)

    async def authenticate(self, request: Request = request) -> Principal:
        """The caller of ``request`` (the current request's proxy by default)."""
        header = gateway_header(request, b"authorization") or ""
        if (not header and request.method in ("GET", "HEAD") and COOKIE in request.cookies
                and request.path.startswith("/v1/")):
            # The console's session stands for its admin key on reads of /v1 (its
            # pages fetch history and open the event stream); never for a change.
            return await self.session_principal(request.cookies[COOKIE])
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            self._refuse("missing API key (Authorization: Bearer <key>)")
        return self._take(await self.verify(key.strip()), self.system.clock.now())

    async def verify(self, key: str) -> Principal:
        """Whose key this is (401 when it is unknown, wrong or revoked), from the cache
        of verified keys when it can be; a lookup is charged to the caller's address.
        The bearer check and the console's sign-in both come here."""
        parts = split_key(key)
        if parts is None:
            self._refuse(UNKNOWN_KEY, INVALID_KEY)
        key_id, secret = parts
        now = self.system.clock.now()
        known = self.verified.get(key_id, now)
        if known is not None:
            principal, secret_hash = known
            if not secret_matches(secret, secret_hash):
                self._refuse(UNKNOWN_KEY, INVALID_KEY)
            return principal
        if self.unknown.holds(key_id, now):
            self._refuse(UNKNOWN_KEY, INVALID_KEY)
        self.charge_address()  # before the lookup: the address pays for it
        found = await self._lookup(key_id, now)
        if found is None:
            self.unknown.add(key_id, now)
            raise Unauthorized(UNKNOWN_KEY, WWW_Authenticate=INVALID_KEY)
        if not secret_matches(secret, found.secret_hash):
            raise Unauthorized(UNKNOWN_KEY, WWW_Authenticate=INVALID_KEY)
        if found.revoked:  # said only to the holder of the secret
            raise Unauthorized(REVOKED_KEY, WWW_Authenticate=INVALID_KEY)
        return found.principal

    async def _lookup(self, key_id: str, now: float) -> KeyRecord | None:
        """The stored key; a live one is remembered unless a revocation came meanwhile."""
        forgotten = self._forgotten
        found = await self.system.keys.ask(LookupKey(key_id))
        if found is not None and not found.revoked and forgotten == self._forgotten:
            self.verified.add(found.principal, found.secret_hash, now)
        return found

    def _take(self, principal: Principal, now: float) -> Principal:
        """A token from the key's bucket (429 when it has none left)."""
        wait = self.limiter.take(principal.key_id, now)
        if wait > 0:
            raise RateLimited("too many requests for this key",
                              Retry_After=str(max(1, int(wait + 0.999))))
        return principal

    async def session_principal(self, session_id: str) -> Principal:
        """The admin behind a console session, checked on every request: a session
        whose key was revoked (or is gone) ends here."""
        key_id = self.sessions.key_id_of(session_id)
        if key_id is None:
            self._refuse("the console session is over; sign in again")
        now = self.system.clock.now()
        known = self.verified.get(key_id, now)
        if known is not None:
            return self._take(known[0], now)
        found = await self._lookup(key_id, now)
        if found is None or found.revoked:
            self.sessions.end_for_key(key_id)
            raise Unauthorized("the key of this console session was revoked")
        return self._take(found.principal, now)


def allow(*roles: str, admin: bool = True, refusal: str | None = None) -> Callable[[F], F]:
    """Mark a route with the roles that may call it (and whether an admin may too).

    Checked right after authentication, before the body is read or parsed
    (``preflight.check_roles``): a key of the wrong role costs the server nothing.
    Goes directly below the route decorator, above ``validate_request``.
    """
    def mark(view: F) -> F:
        view.allowed_roles = (roles, admin, refusal)  # type: ignore[attr-defined]
        return view
    return mark


def require(*roles: str) -> Principal:
    """The caller's principal, if its role is one of ``roles`` (admin always is)."""
    principal: Principal | None = g.get("principal")
    if principal is None:
        raise Unauthorized("missing API key")
    if principal.role != "admin" and principal.role not in roles:
        raise Forbidden(f"a {principal.role} key may not do this")
    return principal


def require_tenant(*roles: str) -> tuple[Principal, str | None]:
    """The principal and the tenant it is limited to (None for admin: every tenant)."""
    principal = require(*roles)
    if principal.role == "admin":
        return principal, None
    if principal.tenant is None:
        raise Forbidden("this client key is bound to no tenant")
    return principal, principal.tenant


def worker_sites(principal: Principal, asked: list[str] | None) -> tuple[str, ...] | None:
    """The sites a lease may draw from: what the worker asked, within its key's sites."""
    if asked is None:
        return principal.sites
    if principal.sites is not None:
        refused = [s for s in asked if s not in principal.sites]
        if refused:
            raise Forbidden(f"this key may not serve site(s) {', '.join(refused)}")
    return tuple(dict.fromkeys(asked))
