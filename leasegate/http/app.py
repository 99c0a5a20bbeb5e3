"""The Quart-Trio application: routes → actor messages → responses.

The app owns no actors; it is handed a running :class:`System`
(``app.extensions["leasegate"]``), so a crashed actor stops the process
instead of leaving hypercorn serving 500s.
"""

from __future__ import annotations

import functools
import itertools
import math
import secrets
import time
from typing import Any

import orjson
import quart_schema.conversion
from pydantic import TypeAdapter
from quart import Response, current_app, g, request
from quart.json.provider import DefaultJSONProvider
from quart_schema import QuartSchema
from quart_schema.validation import QUART_SCHEMA_QUERYSTRING_ATTRIBUTE
from quart_trio import QuartTrio
from werkzeug.exceptions import RequestTimeout as BodyTooSlow

from leasegate.actors.runtime.mailbox import request_id
from leasegate.actors.system import System
from leasegate.errors import (
    InvalidRequest,
    MethodNotAllowed,
    PayloadTooLarge,
    RequestTimeout,
    Unavailable,
)
from leasegate.http import (
    docs,
    errors,
    routes_admin,
    routes_artifacts,
    routes_devices,
    routes_events,
    routes_ledger,
    routes_operator,
    routes_queries,
    routes_tasks,
)
from leasegate.http.auth import Authenticator, check_route_roles
from leasegate.http.body_guard import BodyGuard
from leasegate.http.connection import OneTaskHTTPConnection
from leasegate.http.console import routes as console
from leasegate.http.metrics import Metrics
from leasegate.http.openapi import LeasegateOpenAPI
from leasegate.http.parked import ParkedPolls
from leasegate.ids import ID_RULE, is_id

ID_ARGS = {"task_id", "query_id", "key_id", "device_id", "site"}
PUBLIC_ENDPOINTS = {"admin.health", "openapi", *docs.ENDPOINTS}
# Keys and items of one JSON body: bounds the work of parsing and validating it,
# which the byte limit alone does not (100k one-byte keys fit in a megabyte).
MAX_JSON_VALUES = 20_000
# No request body has more fields than this; past it, validation would spend its
# time describing each unknown field.
MAX_BODY_FIELDS = 64


# Request ids this process makes up: a random prefix once, then a counter (one
# urandom call per request cost more than the rest of the id's handling).
_REQUEST_ID_PREFIX = secrets.token_hex(4)
_request_numbers = itertools.count()


def new_request_id() -> str:
    return f"{_REQUEST_ID_PREFIX}{next(_request_numbers) & 0xFFFFFFFF:08x}"


@functools.lru_cache(maxsize=256)
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)


def _cached_adapter(model: Any) -> TypeAdapter[Any]:
    """quart-schema builds a new pydantic TypeAdapter (a validator compiled anew) for
    every body it validates; the models are our few classes, so one each is kept."""
    try:
        return _adapter(model)
    except TypeError:  # an unhashable type: as quart-schema would
        return TypeAdapter(model)


quart_schema.conversion.TypeAdapter = _cached_adapter  # type: ignore[attr-defined,assignment]


def _value_count_exceeds(document: Any, limit: int) -> bool:
    """Whether ``document`` holds more than ``limit`` values and keys (no recursion)."""
    count, stack = 0, [document]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            count += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        if count > limit:
            return True
    return False


def _separators(s: str | bytes) -> int:
    """How many ``, : [ {`` the body holds: every JSON value but the first follows one."""
    if isinstance(s, bytes):
        return sum(s.count(mark) for mark in (b",", b":", b"[", b"{"))
    return sum(s.count(mark) for mark in ",:[{")


# orjson's output as Quart's would be (sorted keys, compact); types it would render
# differently (dates, dataclasses) raise instead, and go to Quart's own.
ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
                  | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS)


class JSONProvider(DefaultJSONProvider):
    """Quart's JSON, encoded and decoded by orjson (a third of the time of the
    standard library's), where a document nested past Python's recursion limit is
    a malformed body (400), not a server error.

    What orjson refuses (integers past 64 bits, keys that are not strings, a body
    that is not JSON) goes to the standard library, so what is accepted and the
    messages of what is not stay the same."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        if kwargs.keys() <= {"separators"} and kwargs.get("separators", (",", ":")) == (",", ":"):
            try:
                return orjson.dumps(obj, option=ORJSON_OPTIONS).decode()
            except TypeError:
                pass
        return super().dumps(obj, **kwargs)

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            document = self._loads_slowly(s, **kwargs) if kwargs else orjson.loads(s)
        except orjson.JSONDecodeError:
            document = self._loads_slowly(s, **kwargs)
        return self._bounded(s, document)

    def _loads_slowly(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            return super().loads(s, **kwargs)
        except RecursionError:
            raise ValueError("the JSON body is nested too deeply to parse") from None

    @staticmethod
    def _bounded(s: str | bytes, document: Any) -> Any:
        # Counting separators (fast, in C, on the body as it came: no second decode)
        # spares the walk for all but the largest bodies.
        if (_separators(s) >= MAX_JSON_VALUES
                and _value_count_exceeds(document, MAX_JSON_VALUES)):
            raise PayloadTooLarge(f"the body holds more than {MAX_JSON_VALUES} JSON values "
                                  "(keys and items); that is the limit")
        if isinstance(document, dict) and len(document) > MAX_BODY_FIELDS:
            raise InvalidRequest(f"the body has {len(document)} fields; no request takes "
                                 f"more than {MAX_BODY_FIELDS}")
        return document


def create_app(system: System) -> QuartTrio:
    app = QuartTrio("leasegate")
    app.asgi_http_class = OneTaskHTTPConnection  # a task fewer per request
    app.request_class = routes_artifacts.request_class(system.settings)
    app.config["MAX_CONTENT_LENGTH"] = system.settings.max_body_bytes
    # A body still arriving after this is a 408 (below hypercorn's read timeout,
    # which would otherwise drop the connection without an answer).
    app.config["BODY_TIMEOUT"] = system.settings.http_body_timeout
    app.config["JSON_SORT_KEYS"] = False
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    QuartSchema(
        app,
        info={"title": "leasegate", "version": "1",
              "description": "A durable task gateway: at-most-once tasks, "
                             "at-least-once queries, long-poll workers. An integer "
                             "(money, counts) is a JSON integer: 100, never 100.0, 1e2, "
                             "\"100\" or true."},
        security_schemes={"bearer": {"type": "http", "scheme": "bearer"}},
        security=[{"bearer": []}],
        openapi_provider_class=LeasegateOpenAPI,
        swagger_ui_path=None, redoc_ui_path=None, scalar_ui_path=None,  # CDN pages: docs.py
    )
    app.json = JSONProvider(app)
    # quart-schema wraps make_response to pass every return value through a new
    # pydantic TypeAdapter (about 20 µs a response, a sixth of a submit's cost).
    # Our routes return plain JSON-able values, so Quart's own is enough.
    del app.make_response
    app.extensions["leasegate"] = system
    authenticator = Authenticator(system)
    app.extensions["leasegate.auth"] = authenticator
    metrics = Metrics()
    app.extensions["leasegate.metrics"] = metrics
    app.extensions["leasegate.parked"] = ParkedPolls(system.settings.max_parked_per_key,
                                                     system.settings.max_parked_per_address)
    system.events.listeners.append(metrics.on_job_event)  # outcomes, dispatch latency
    async def sweep_buckets(now: float) -> None:
        authenticator.sweep(now)

    system.add_background_job("http", "rate_limit_buckets",
                              system.settings.housekeeping_interval, sweep_buckets)

    for blueprint in (routes_queries.bp, routes_tasks.bp, routes_artifacts.bp, routes_admin.bp,
                      routes_ledger.bp, routes_events.bp, routes_devices.bp, routes_operator.bp):
        app.register_blueprint(blueprint)
    errors.install(app)
    docs.install(app)
    console.install(app, system)

    @app.errorhandler(BodyTooSlow)
    async def body_too_slow(exc: BodyTooSlow) -> Response:
        return errors.error_response(RequestTimeout(
            f"the request body did not arrive within {system.settings.http_body_timeout:g} s"))

    @app.before_request
    async def authenticate() -> None:
        g.started = time.perf_counter()
        _refuse_while_draining(system)
        # Every message this request sends carries its id (actors' log lines name it).
        given = request.headers.get("X-Request-Id")
        g.request_id = given if is_id(given) else new_request_id()
        request_id.set(g.request_id)
        # A fixed path wins over a templated one, as in /openapi.json: GET
        # /v1/tasks/lease is a 405, not a read of the task called "lease".
        rule = request.url_rule
        fixed = errors.concrete_methods(app, request.path) if rule and rule.arguments else None
        misrouted = fixed is not None
        public = (request.endpoint in PUBLIC_ENDPOINTS or request.endpoint is None  # 404/405
                  or (request.endpoint == "admin.metrics" and system.settings.metrics_public))
        if public or misrouted:
            authenticator.charge_address()  # answered without a key: the address pays
        if misrouted:
            allowed = ", ".join(sorted(fixed or ()))
            raise MethodNotAllowed(f"{request.path} takes {allowed} only", Allow=allowed)
        if request.blueprint == console.bp.name:
            return  # the console's guard checks its session cookie instead of a key
        _check_query_names()
        if public:
            return
        g.principal = principal = await authenticator.authenticate()
        check_route_roles(principal)  # before the body is read: the wrong key costs nothing
        view_args = request.view_args or {}
        for name in ID_ARGS.intersection(view_args):
            if not is_id(view_args[name]):
                raise InvalidRequest(f"{name} must be {ID_RULE}")

    @app.after_request
    async def count(response: Response) -> Response:
        route = request.url_rule.rule if request.url_rule else "unmatched"
        metrics.observe(request.method, route, response.status_code, g.get("started"))
        if "request_id" in g:
            response.headers["X-Request-Id"] = g.request_id
        return response

    # Outermost: sees every request's body and answer (see body_guard).
    app.asgi_app = BodyGuard(app.asgi_app, system.settings)  # type: ignore[method-assign]
    return app


def _refuse_while_draining(system: System) -> None:
    """While the server shuts down, every request gets 503 (5030), before its key or
    body is read: come back (to the next process) after the drain; and close the
    connection, so no client keeps one that is about to go."""
    if system.draining:
        retry_after = str(max(1, math.ceil(system.settings.drain_seconds)))
        raise Unavailable("the gateway is shutting down; retry shortly",
                          Retry_After=retry_after, Connection="close")


def _check_query_names() -> None:
    """A route without query parameters refuses any (a typo must not be ignored);
    routes with some validate them with a model that forbids unknown names."""
    if not request.args or request.endpoint is None:
        return
    view = current_app.view_functions.get(request.endpoint)
    if getattr(view, QUART_SCHEMA_QUERYSTRING_ATTRIBUTE, None) is None:
        names = ", ".join(sorted(request.args))
        raise InvalidRequest(f"unknown query parameter(s): {names}")
