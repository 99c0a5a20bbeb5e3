"""Authentication, roles and rate limits for each request.

``Authorization: Bearer lg_<key_id>_<secret>``. The key is found by id (the
HTTP layer keeps the keys it has seen; a revocation through the API drops
its entry, so it takes effect on the next request) and its secret compared
in constant time. Missing or unknown: 401 (4010); known but the wrong role
or site: 403 (4030).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from quart import current_app, g, request

from leasegate.actors.key_messages import LookupKey
from leasegate.actors.key_views import Principal
from leasegate.actors.system import System
from leasegate.errors import Forbidden, RateLimited, Unauthorized
from leasegate.http.limits import RateLimiter
from leasegate.keyformat import secret_matches, split_key

F = TypeVar("F", bound=Callable[..., object])

SUBMITTER_ONLY = "submitting needs a client key: work belongs to a tenant"


class Authenticator:
    def __init__(self, system: System) -> None:
        self.system = system
        # key_id -> (principal, secret hash); bounded by the keys admins create.
        self._known: dict[str, tuple[Principal, str]] = {}
        settings = system.settings
        self.limiter = RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst)

    def forget(self, key_id: str) -> None:
        self._known.pop(key_id, None)

    async def authenticate(self) -> Principal:
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("missing API key (Authorization: Bearer <key>)")
        parts = split_key(key.strip())
        if parts is None:
            raise Unauthorized("unknown API key")
        key_id, secret = parts
        known = self._known.get(key_id)
        if known is None:
            found = await self.system.keys.mailbox.ask(LookupKey(key_id))
            if found is None:
                raise Unauthorized("unknown API key")
            if not secret_matches(secret, found.secret_hash):
                raise Unauthorized("unknown API key")
            if found.revoked:  # said only to the holder of the secret
                raise Unauthorized("this API key was revoked")
            known = self._known[key_id] = (found.principal, found.secret_hash)
        principal, secret_hash = known
        if not secret_matches(secret, secret_hash):
            raise Unauthorized("unknown API key")
        wait = self.limiter.take(key_id, self.system.clock.now())
        if wait > 0:
            raise RateLimited("too many requests for this key",
                              Retry_After=str(max(1, int(wait + 0.999))))
        return principal


def allow(*roles: str, admin: bool = True, refusal: str | None = None) -> Callable[[F], F]:
    """Mark a route with the roles that may call it (and whether an admin may too).

    Checked right after authentication, before the body is read or parsed: a
    key of the wrong role costs the server nothing. Goes directly below the
    route decorator, above ``validate_request``.
    """
    def mark(view: F) -> F:
        view.allowed_roles = (roles, admin, refusal)  # type: ignore[attr-defined]
        return view
    return mark


def check_route_roles(principal: Principal) -> None:
    """Refuse (403) a principal whose role the current route was not marked for."""
    view = current_app.view_functions.get(request.endpoint or "")
    marked: tuple[tuple[str, ...], bool, str | None] | None = getattr(
        view, "allowed_roles", None)
    if marked is None:
        return
    roles, admin, refusal = marked
    if principal.role == "admin" and admin:
        return
    if principal.role not in roles:
        raise Forbidden(refusal or f"a {principal.role} key may not do this")
    if principal.role == "client" and principal.tenant is None:
        raise Forbidden("this client key is bound to no tenant")


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


def require_submitter() -> str:
    """The tenant new work belongs to: only a client key (bound to a tenant) submits."""
    principal = require("client")
    if principal.role != "client" or principal.tenant is None:
        raise Forbidden(SUBMITTER_ONLY)
    return principal.tenant
