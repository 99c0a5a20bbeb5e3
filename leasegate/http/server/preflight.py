"""What every request goes through before its route: the request id, the drain,
misrouted paths, query names, the key, the route's roles, path ids; once they pass,
the ``100 Continue`` a client may wait for before it sends its body (``context.continue_body``).

What a route needs checked is worked out once per route (its :class:`RoutePlan`:
public or not, the roles it was marked for, its path ids, whether it takes query
parameters), not on every request::

    app.before_request(Preflight(app, system, authenticator).check)
"""

from __future__ import annotations

import inspect
import itertools
import math
import secrets
import time
from dataclasses import dataclass

from quart import Quart, Request, g, request

from leasegate.actors.keys.views import Principal
from leasegate.actors.runtime.mailbox import request_id
from leasegate.errors import Forbidden, InvalidRequest, Unavailable
from leasegate.http.openapi import docs
from leasegate.http.server import errors
from leasegate.http.server.auth import Authenticator
from leasegate.http.server.context import continue_body, continues_body_itself, header
from leasegate.ids import ID_RULE, is_id
from leasegate.system import System

ID_ARGS = ("task_id", "query_id", "key_id", "device_id", "site", "schedule_id", "endpoint_id",
           "delivery_id")
PUBLIC_ENDPOINTS = {"admin.health", "openapi", *docs.ENDPOINTS}
CONSOLE_BLUEPRINT = "console"

# Request ids this process makes up: a random prefix once, then a counter (one
# urandom call per request cost more than the rest of the id's handling).
_REQUEST_ID_PREFIX = secrets.token_hex(4)
_request_numbers = itertools.count()


def new_request_id() -> str:
    return f"{_REQUEST_ID_PREFIX}{next(_request_numbers) & 0xFFFFFFFF:08x}"


Roles = tuple[tuple[str, ...], bool, str | None]  # see auth.allow


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """What the checks before one route (an endpoint; None: no route matched) need."""

    public: bool  # answered without a key: the caller's address pays
    console: bool  # the console's guard checks its session cookie instead of a key
    takes_query: bool  # validates query parameters (others refuse any)
    roles: Roles | None  # marked with auth.allow
    id_args: tuple[str, ...]  # path variables that must be ids
    continues_body_itself: bool  # the route sends the 100 after checks of its own


class Preflight:
    def __init__(self, app: Quart, system: System, authenticator: Authenticator) -> None:
        self.app = app
        self.system = system
        self.authenticator = authenticator
        self._plans: dict[str | None, RoutePlan] = {}

    def plan(self, endpoint: str | None) -> RoutePlan:
        found = self._plans.get(endpoint)
        if found is None:
            found = self._plans[endpoint] = self._make_plan(endpoint)
        return found

    def _make_plan(self, endpoint: str | None) -> RoutePlan:
        view = self.app.view_functions.get(endpoint) if endpoint is not None else None
        rules = self.app.url_map.iter_rules(endpoint) if view is not None else ()
        arguments = {name for rule in rules for name in rule.arguments}
        metrics_public = endpoint == "admin.metrics" and self.system.settings.metrics_public
        return RoutePlan(
            public=endpoint is None or endpoint in PUBLIC_ENDPOINTS or metrics_public,
            console=endpoint is not None and endpoint.startswith(f"{CONSOLE_BLUEPRINT}."),
            takes_query=_takes_query(view),
            roles=getattr(view, "allowed_roles", None),
            id_args=tuple(name for name in ID_ARGS if name in arguments),
            continues_body_itself=continues_body_itself(view))

    async def check(self) -> None:
        """The before-request hook (a coroutine function: Quart runs any other kind
        on a thread)."""
        plan = await self._check(request)
        # No route (a 404 or 405 follows): no body is wanted either.
        if request.endpoint is not None and not plan.continues_body_itself:
            await continue_body(request.scope)

    async def _check(self, request: Request) -> RoutePlan:
        """What must pass before the body is wanted; the route's plan."""
        g.started = time.perf_counter()
        if self.system.draining:
            _refuse_while_draining(self.system)
        # Every message this request sends carries its id (actors' log lines name it).
        given = header(request, b"x-request-id")
        g.request_id = rid = given if is_id(given) else new_request_id()
        request_id.set(rid)
        plan = self.plan(request.endpoint)
        # A fixed path wins over a templated one, as in /openapi.json: GET
        # /v1/tasks/lease is a 405, not a read of the task called "lease".
        rule = request.url_rule
        templated = rule is not None and rule.arguments
        fixed = errors.concrete_methods(self.app, request.path) if templated else None
        if plan.public or fixed is not None:
            self.authenticator.charge_address()  # answered without a key: the address pays
        if fixed is not None:
            raise errors.wrong_method(request.method, request.path, ", ".join(sorted(fixed)))
        if plan.console:
            return plan
        if (request.query_string and not plan.takes_query and request.endpoint is not None
                and request.args):
            # A typo must not be ignored; routes with parameters validate them with a
            # model that forbids unknown names.
            names = ", ".join(sorted(request.args))
            raise InvalidRequest(f"unknown query parameter(s): {names}")
        if plan.public:
            return plan
        g.principal = principal = await self.authenticator.authenticate(request)
        if plan.roles is not None:  # before the body is read: the wrong key costs nothing
            check_roles(principal, plan.roles)
        if plan.id_args:
            view_args = request.view_args or {}
            for name in plan.id_args:
                if name in view_args and not is_id(view_args[name]):
                    raise InvalidRequest(f"{name} must be {ID_RULE}")
        return plan


def _takes_query(view: object) -> bool:
    """Whether ``view`` validates its query string: quart-schema's
    ``validate_querystring`` hands it ``query_args`` (its signature, through the
    decorators' ``functools.wraps``, is the view's own)."""
    return callable(view) and "query_args" in inspect.signature(view).parameters


def check_roles(principal: Principal, marked: Roles) -> None:
    """Refuse (403) a principal whose role the route was not marked for."""
    roles, admin, refusal = marked
    if principal.role == "admin" and admin:
        return
    if principal.role not in roles:
        raise Forbidden(refusal or f"a {principal.role} key may not do this")
    if principal.role == "client" and principal.tenant is None:
        raise Forbidden("this client key is bound to no tenant")


def _refuse_while_draining(system: System) -> None:
    """While the server shuts down, every request gets 503 (5030), before its key or
    body is read: come back (to the next process) after the drain; and close the
    connection, so no client keeps one that is about to go."""
    retry_after = str(max(1, math.ceil(system.settings.drain_seconds)))
    raise Unavailable("the gateway is shutting down; retry shortly",
                      Retry_After=retry_after, Connection="close")
