"""The Quart-Trio application: routes → actor messages → responses.

The app owns no actors; it is handed a running :class:`System`
(``app.extensions["leasegate"]``), so a crashed actor stops the process
instead of leaving hypercorn serving 500s.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import httpx
import orjson
from quart import Response, g, request
from quart.json.provider import DefaultJSONProvider
from quart_schema import QuartSchema
from quart_trio import QuartTrio
from werkzeug.exceptions import RequestTimeout as BodyTooSlow

from leasegate.actors.payloads import may_hold_numbers, orjson_default
from leasegate.errors import (
    InvalidRequest,
    PayloadTooLarge,
    RequestTimeout,
)
from leasegate.http.console import routes as console
from leasegate.http.metrics.collector import Metrics
from leasegate.http.models.payloads import with_exact_payloads
from leasegate.http.openapi import docs
from leasegate.http.openapi.document import LeasegateOpenAPI
from leasegate.http.routes import (
    admin,
    artifacts,
    devices,
    events,
    ledger,
    operator,
    queries,
    schedules,
    tasks,
    webhooks,
)
from leasegate.http.server import errors
from leasegate.http.server.auth import Authenticator
from leasegate.http.server.body_guard import Guarded
from leasegate.http.server.held_polls import WaitingPolls
from leasegate.http.server.preflight import Preflight
from leasegate.http.server.uploads import UploadSlots
from leasegate.http.webhook_delivery import Deliverer
from leasegate.system import System

# Keys and items of one JSON body: bounds the work of parsing and validating it,
# which the byte limit alone does not (100k one-byte keys fit in a megabyte).
MAX_JSON_VALUES = 20_000
# No request body has more fields than this; past it, validation would spend its
# time describing each unknown field.
MAX_BODY_FIELDS = 64


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


def _orjson_option(kwargs: dict[str, Any]) -> int | None:
    """orjson's options for what Quart asks of ``dumps``: compact (the API), or
    ``indent=2`` (the console's ``tojson``, keys sorted); None for anything else."""
    indent = kwargs.get("indent")
    if (kwargs.keys() - {"separators", "indent", "sort_keys"} or indent not in (None, 2)
            or kwargs.get("separators", (",", ":")) != (",", ":")
            or not kwargs.get("sort_keys", True)):
        return None
    return ORJSON_OPTIONS if indent is None else ORJSON_OPTIONS | orjson.OPT_INDENT_2


_TOO_DEEP = "the JSON body is nested too deeply to parse"


class JSONProvider(DefaultJSONProvider):
    """Quart's JSON, encoded and decoded by orjson (a third of the time of the
    standard library's), where a document nested past Python's recursion limit is
    a malformed body (400), not a server error.

    What orjson refuses (integers past 64 bits, keys that are not strings, a body
    that is not JSON) goes to the standard library, so what is accepted and the
    messages of what is not stay the same.

    Payloads keep their numbers as sent: a body that may hold one orjson would
    change (``1e2``, ``-0``, past 64 bits) has its payload fields read again exactly
    (``models.payloads.with_exact_payloads``), and a payload's ``Number`` is written as
    its literal."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        option = _orjson_option(kwargs)
        if option is not None:
            try:  # a payload's Number (a literal kept as sent) only orjson can write
                return orjson.dumps(obj, option=option, default=orjson_default).decode()
            except TypeError:
                pass
        return super().dumps(obj, **kwargs)

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            document = self._loads_slowly(s, **kwargs) if kwargs else orjson.loads(s)
        except orjson.JSONDecodeError:
            document = self._loads_slowly(s, **kwargs)
        document = self._bounded(s, document)
        if not kwargs and may_hold_numbers(s):  # a payload's 1e2 stays 1e2 (not 100.0)
            try:
                document = with_exact_payloads(document, s)
            except RecursionError:
                raise ValueError(_TOO_DEEP) from None
        return document

    def _loads_slowly(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            return super().loads(s, **kwargs)
        except RecursionError:
            raise ValueError(_TOO_DEEP) from None

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


def create_app(system: System, *,
               webhook_transport: httpx.AsyncBaseTransport | None = None) -> QuartTrio:
    """The app of ``system`` (``webhook_transport``: where webhooks go instead of the
    network, for tests)."""
    app = QuartTrio("leasegate")
    app.asgi_app = Guarded(app.asgi_app, system.settings)  # type: ignore[method-assign]
    app.request_class = artifacts.request_class(system.settings)
    app.config["MAX_CONTENT_LENGTH"] = system.settings.max_body_bytes
    # A body still arriving after this is a 408 (below hypercorn's read timeout,
    # which would otherwise drop the connection without an answer).
    app.config["BODY_TIMEOUT"] = system.settings.http_body_timeout
    app.config["JSON_SORT_KEYS"] = False
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    _document(app)
    app.json = JSONProvider(app)
    app.extensions["leasegate"] = system
    authenticator = Authenticator(system)
    app.extensions["leasegate.auth"] = authenticator
    metrics = Metrics()
    app.extensions["leasegate.metrics"] = metrics
    polls = WaitingPolls(system.settings.max_parked_per_key,
                         system.settings.max_parked_per_address)
    app.extensions["leasegate.waiting_polls"] = polls
    app.extensions["leasegate.uploads"] = UploadSlots(system.settings.max_uploads_per_key,
                                                      system.settings.max_uploads)

    def key_revoked(key_ids: tuple[str, ...]) -> None:
        # Nothing of a revoked key stands here from now on: what the authenticator
        # remembers of it, its console sessions, its waiting polls and event streams.
        for key_id in key_ids:
            authenticator.forget(key_id)
            polls.end_for_key(key_id)

    system.on_key_revoked(key_revoked)
    # Outcomes, dispatch latency: of this gateway's own commits (each counted once).
    system.events.own_listeners.append(metrics.on_job_event)

    async def sweep_buckets(now: float) -> None:
        authenticator.sweep(now)

    system.add_background_job("http", "rate_limit_buckets",
                              system.settings.housekeeping_interval, sweep_buckets)

    deliverer = Deliverer(system, webhook_transport)
    system.add_service(deliverer.record, deliverer.run)

    for blueprint in (queries.bp, tasks.bp, artifacts.bp, admin.bp, ledger.bp, events.bp,
                      devices.bp, operator.bp, schedules.bp, webhooks.bp):
        app.register_blueprint(blueprint)
    errors.install(app)
    docs.install(app)
    console.install(app, system)

    _hooks(app, system, authenticator, metrics)
    return app


def _hooks(app: QuartTrio, system: System, authenticator: Authenticator,
           metrics: Metrics) -> None:
    """What every request passes through: the checks before it (auth, limits, ids),
    its count after it, and the answer to a body too slow."""

    @app.errorhandler(BodyTooSlow)
    async def body_too_slow(exc: BodyTooSlow) -> Response:
        return errors.error_response(RequestTimeout(
            f"the request body did not arrive within {system.settings.http_body_timeout:g} s"))

    app.before_request(Preflight(app, system, authenticator).check)

    @app.after_request
    async def count(response: Response) -> Response:
        rule = request.url_rule
        metrics.observe(request.method, rule.rule if rule else "unmatched",
                        response.status_code, g.get("started"))
        request_id = g.get("request_id")
        if request_id is not None:
            response.headers["X-Request-Id"] = request_id
        return response


def _document(app: QuartTrio) -> None:
    """``/openapi.json``, by quart-schema (with our additions)."""
    QuartSchema(
        app,
        info={"title": "leasegate", "version": version("leasegate"),
              "description": "A durable task gateway: at-most-once tasks, "
                             "at-least-once queries, long-poll workers. An integer "
                             "(money, counts) is a whole number: 100 (100.0 and 1e2 are 100 "
                             "too), never \"100\" or true."},
        security_schemes={"bearer": {"type": "http", "scheme": "bearer"}},
        security=[{"bearer": []}],
        openapi_provider_class=LeasegateOpenAPI,
        swagger_ui_path=None, redoc_ui_path=None, scalar_ui_path=None,  # CDN pages: docs.py
    )
