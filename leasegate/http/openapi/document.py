"""``/openapi.json``: quart-schema's document, completed to describe every route and answer.

quart-schema documents what the decorators say (request and response models).
:class:`LeasegateOpenAPI` adds what they cannot say:

- the error envelope for every status an operation can answer with, all as
  ``#/components/schemas/ErrorEnvelope``: 400 everywhere (an unknown query
  parameter is refused on every route; each operation's 400 says what else it
  refuses), 503 everywhere (storage trouble or shutting down), 401/403 when a
  key is needed, 429 everywhere (per key, or per address), 408/413 with a
  body, 404 with a path id the route does not create, 405 where an id may name
  a route, 409 where the route documents it; each saying why on that route;
- the rules the server checks on path ids (patterns, route names, a credit's
  tenant account);
- the replay answer (200, ``created: false``) of the idempotent submits;
- the raw bodies of the artifact routes and their ``X-Worker-Id`` /
  ``X-Lease-Token`` headers, and the Prometheus text of ``/metrics``;
- ``security: []`` on the routes that need no key;
- a description on every response (OpenAPI requires one), status codes as
  strings, request bodies marked required;
- what ``/docs`` shows of each operation: its section, summary and description in
  Markdown (see :mod:`leasegate.http.openapi.text`).

Wired in ``create_app`` with ``QuartSchema(..., openapi_provider_class=LeasegateOpenAPI)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, TypeVar

from pydantic import BaseModel
from quart import Quart
from quart_schema import QuartSchema
from quart_schema.openapi import OpenAPIProvider
from quart_schema.validation import (
    QUART_SCHEMA_QUERYSTRING_ATTRIBUTE,
    QUART_SCHEMA_REQUEST_ATTRIBUTE,
    DataSource,
)
from werkzeug.routing.rules import Rule

from leasegate.http.models.replies import ErrorEnvelope, reply_schema
from leasegate.http.openapi.text import as_markdown, describe, sections
from leasegate.ids import ARTIFACT_NAME_PATTERN, ID_PATTERN, RESERVED_JOB_IDS

ERROR_REF = {"$ref": "#/components/schemas/ErrorEnvelope"}
BINARY = {"type": "string", "format": "binary"}
ID_SCHEMA = {"type": "string", "pattern": ID_PATTERN}
PATH_IDS = ("task_id", "query_id", "key_id", "device_id", "account", "site", "schedule_id",
            "endpoint_id", "delivery_id")
# A tenant's account, the one a credit may go to: an id not starting with "@".
TENANT_ACCOUNT = {"type": "string", "pattern": r"^[A-Za-z0-9._:-][A-Za-z0-9._:@-]{0,63}$"}
# GET /v1/tasks/lease is the lease route's 405, not a read of a task called "lease".
READS = {("get", "/v1/tasks/{task_id}"), ("get", "/v1/queries/{query_id}")}
ROUTE_NAME = ("method_not_allowed (4050): the id is a route's name ("
              + ", ".join(RESERVED_JOB_IDS) + "), and that route takes POST only (`Allow`).")
# Path ids a route creates or takes as given: no 404 for them.
NEVER_MISSING = {("post", "/v1/ledger/accounts/{account}/credit"),
                 ("post", "/v1/devices/{device_id}/heartbeat")}

# Error responses every operation needing a key can answer with.
AUTH_ERRORS = {
    401: "unauthorized (4010): missing, unknown or revoked key.",
    403: "forbidden (4030): known key, wrong role or site (or a client key bound to no "
         "tenant).",
    429: "rate_limited (4290): too many requests for this key (or, without a valid key, "
         "from this address); retry after `Retry-After` seconds.",
}
# Public routes: rate-limited per client address.
ADDRESS_LIMITED = ("rate_limited (4290): too many requests from this address; retry after "
                   "`Retry-After` seconds.")
TOO_MANY = {
    ("post", "/v1/tasks/lease"): AUTH_ERRORS[429] + " Also when this worker key already has "
        "`max_workers_per_key` workers and the lease names a new `worker_id`.",
    ("post", "/v1/tasks"): AUTH_ERRORS[429] + " device_limit (6008): the device table "
        "(`device_capacity`) is full of devices with unfinished tasks; nothing was enqueued.",
    ("post", "/v1/devices/{device_id}/heartbeat"): AUTH_ERRORS[429] + " device_limit "
        "(6008): the device table (`device_capacity`) is full of devices with unfinished "
        "tasks.",
    ("put", "/v1/tasks/{task_id}/artifacts/{name}"): AUTH_ERRORS[429] + " Also when this "
        "key is sending `max_uploads_per_key` uploads, or the gateway `max_uploads`, at "
        "once (before the body is read).",
}
UNAVAILABLE_BY_ROUTE = {
    ("get", "/v1/events"): " Also when `event_max_streams` streams are open.",
}
# Every operation: storage trouble, or a server that is shutting down.
UNAVAILABLE = ("unavailable (5030): storage full or failing, or the server is shutting "
               "down; nothing was changed. Retry (after `Retry-After` seconds when given).")
# What makes a 400 (invalid_request, 4000), by what the operation takes.
BAD_QUERY = "an unknown query parameter"
BAD_BODY = ("malformed JSON, a body without `Content-Type: application/json`, an unknown "
            "field, or a value outside its rules")
# A body a view reads itself (optional, any content type).
BAD_OPTIONAL_BODY = ("a body that is not a JSON object, an unknown field, or a value outside "
                     "its rules")
BAD_PATH = {
    "task_id": "a `task_id` outside its pattern",
    "query_id": "a `query_id` outside its pattern",
    "key_id": "a `key_id` outside its pattern",
    "device_id": "a `device_id` outside its pattern",
    "name": "an artifact name outside its pattern",
    "account": "an `account` outside its pattern (or, to credit, a system account `@...`)",
    "site": "a `site` outside its pattern",
    "schedule_id": "a `schedule_id` outside its pattern (to create one: over 43 characters)",
}
BAD_OTHERWISE = {
    ("post", "/v1/admin/keys"): "a client key without a tenant, sites on a key that is not "
                                "a worker key",
    ("put", "/v1/tasks/{task_id}/artifacts/{name}"): "missing `X-Worker-Id` or "
                                                     "`X-Lease-Token`",
    ("post", "/v1/tasks/{task_id}/reclaim"): "`result` or `cost` with action `requeue`",
}
TOO_LARGE = "payload_too_large (4130): the body or one of its JSON fields is over its limit."
TOO_LARGE_ARTIFACT = ("payload_too_large (4130): the body is over `max_artifact_bytes`, or "
                      "the task's artifacts would pass `max_artifact_bytes_per_task` (the "
                      "artifact it replaces left out).")
TOO_SLOW = ("request_timeout (4080): the body did not arrive within `http_read_timeout`; "
            "nothing was changed.")
NOT_FOUND = {
    "task_id": "task_not_found (6001): no such task for this tenant.",
    "query_id": "query_not_found (6005): no such query for this tenant.",
    "key_id": "not_found (4040): no such key.",
    "schedule_id": "not_found (4040): no such schedule for this tenant.",
}
CONFLICTS = {
    ("post", "/v1/tasks"): "idempotency_conflict (6004): the same `task_id` (also of a task "
                           "purged within `id_tombstone_retention`) with a different payload "
                           "or from another tenant; or, with `max_cost`, an id whose hold was "
                           "settled without a task (a submit that never completed, refunded "
                           "by recovery): submit under another id.",
    ("post", "/v1/queries"): "idempotency_conflict (6004): the same `query_id` (also of a "
                             "query purged within `id_tombstone_retention`) with a different "
                             "payload or from another tenant; or, with `max_cost`, an id whose "
                             "hold was settled without a query (refunded by recovery).",
    ("post", "/v1/queries/{query_id}/result"): "query_lease_invalid (6006): terminal query, "
                                               "other owner or old token.",
    ("put", "/v1/schedules/{schedule_id}"): "state_conflict (6003): another tenant's "
                                             "schedule has this id (fires name their jobs "
                                             "by it); or a new schedule of a tenant that "
                                             "has `max_schedules_per_tenant` already.",
    ("post", "/v1/webhooks"): "state_conflict (6003): the tenant has "
                              "`webhook_max_endpoints` endpoints already (delete one first).",
    ("post", "/v1/ledger/accounts/{account}/credit"): "idempotency_conflict (6004): the same "
                                                      "`ref` with another account or amount.",
}
SHORT_FUNDS = ("insufficient_funds (6007): the tenant's available balance is less than "
               "`max_cost`; nothing was enqueued.")
LEDGER_LIMITS = {
    ("post", "/v1/ledger/accounts/{account}/credit"): (
        "ledger_limit (6010): `amount` is over `ledger_max_amount`, or the money ever "
        "credited would pass `ledger_max_balance`; nothing was credited."),
    ("post", "/v1/tasks"): ("ledger_limit (6010): `max_cost` is over `ledger_max_amount`; "
                            "nothing was held or enqueued."),
    ("post", "/v1/queries"): ("ledger_limit (6010): `max_cost` is over `ledger_max_amount`; "
                              "nothing was held or enqueued."),
}
TASK_CONFLICTS = {
    "cancel": "state_conflict (6003): the task is terminal or stale.",
    "pause": "state_conflict (6003): the task is not a batch task, or cannot be paused now.",
    "resume": "state_conflict (6003): the task is not a batch task, or is not paused.",
    "reclaim": "state_conflict (6003): the task is not stale.",
}
LEASE_CONFLICT = ("task_lease_invalid (6002): not this worker's lease or token (or the claim "
                  "window has passed).")
TASK_CONFLICTS["result"] = (LEASE_CONFLICT + " state_conflict (6003): outcome `paused` for a "
                            "task that is not a batch task.")
ARTIFACT_CONFLICT = (LEASE_CONFLICT + " state_conflict (6003): the task already keeps "
                     "`max_artifacts_per_task` artifacts (an upload under one of their names "
                     "replaces it).")
SUBMITS = {("post", "/v1/tasks"), ("post", "/v1/queries")}
ARTIFACT_PATH = "/v1/tasks/{task_id}/artifacts/{name}"
# One message of GET /v1/events (`data` is JSON text: the event, or {"reason"}).
SSE_MESSAGE = {"type": "object", "required": ["event", "data"], "properties": {
    "event": {"type": "string", "enum": ["job", "reset"]},
    "id": {"type": "string", "pattern": "^[0-9]+$"},
    "data": {"type": "string"},
    "retry": {"type": "integer", "minimum": 0}}}


View = TypeVar("View", bound=Callable[..., Any])
# A view that reads an optional JSON body itself: the model the document shows for it.
OPTIONAL_BODY_ATTRIBUTE = "leasegate_optional_body"


def optional_body(model: type[BaseModel]) -> Callable[[View], View]:
    """For a view that reads its body itself, where an empty one or ``null`` means
    "nothing said" (``routes.operator.optional_reason``): ``/openapi.json`` shows
    ``model`` or null as its body, not required (with the 400, 408 and 413 a body
    brings)."""

    def decorator(func: View) -> View:
        setattr(func, OPTIONAL_BODY_ATTRIBUTE, model)
        return func

    return decorator


class LeasegateOpenAPI(OpenAPIProvider):
    """quart-schema's provider, completed with leasegate's error and auth conventions."""

    _envelope: tuple[dict[str, Any], dict[str, Any]] | None = None

    def __init__(self, app: Quart, extension: QuartSchema) -> None:
        super().__init__(app, extension)
        self.gateway = app  # ours to read (the base class keeps its own, private)

    def schema(self) -> dict[str, Any]:
        document = super().schema()
        paths = document["paths"]
        document["paths"] = {path: paths[path] for path in sorted(paths)}
        envelope, definitions = self._error_envelope()
        schemas = document["components"]["schemas"]
        schemas.update(definitions)
        schemas["ErrorEnvelope"] = envelope
        document["components"]["schemas"] = {name: schemas[name] for name in sorted(schemas)}
        document["tags"] = sections(document["paths"])
        as_markdown(document)
        return document

    def build_paths(self, rule: Rule) -> tuple[dict[str, Any], dict[str, Any]]:
        paths, components = super().build_paths(rule)
        func = self.gateway.view_functions[rule.endpoint]
        json_body = getattr(func, QUART_SCHEMA_REQUEST_ATTRIBUTE, None) is not None
        querystring = getattr(func, QUART_SCHEMA_QUERYSTRING_ATTRIBUTE, None) is not None
        public = self._is_public(rule.endpoint)
        envelope, _ = self._error_envelope()
        optional = getattr(func, OPTIONAL_BODY_ATTRIBUTE, None)
        if optional is not None:  # a body the view reads itself, when there is one
            body, definitions = self.build_request_body(optional, DataSource.JSON)
            components.update(definitions)
            media = body["content"]["application/json"]
            media["schema"] = {"anyOf": [media["schema"], {"type": "null"}]}
        for path, item in paths.items():
            for method in list(item):
                # quart-schema shares one operation's dicts between methods: copy.
                operation: dict[str, Any] = copy.deepcopy(item[method])
                item[method] = operation
                describe(operation, method, path, func.__doc__)
                if optional is not None:
                    operation["requestBody"] = {**copy.deepcopy(body), "required": False}
                self._complete(operation, method, path, json_body=json_body,
                               querystring=querystring, public=public, envelope=envelope)
        return paths, components

    def build_response_object(self, model: type[Any], headers_model: type[Any] | None,
                              ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A reply's schema as the wire has it (``reply_schema``): from the dataclass the
        route renders, or the model of a reply built as a dict. Its description is the
        status's, or the route's (a dataclass's docstring is for the code's readers)."""
        assert headers_model is None, "no route documents reply headers with a model"
        schema, definitions = reply_schema(model)
        return {"content": {"application/json": {"schema": schema}}, "description": ""}, \
            definitions

    # ---- helpers ----------------------------------------------------------------------

    def _error_envelope(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """ErrorEnvelope's schema as quart-schema builds it, and its definitions."""
        if self._envelope is None:
            response, definitions = self.build_response_object(ErrorEnvelope, None)
            self._envelope = (response["content"]["application/json"]["schema"], definitions)
        return copy.deepcopy(self._envelope)

    def _is_public(self, endpoint: str) -> bool:
        # Imported here: app.py imports this module.
        from leasegate.http.server.preflight import PUBLIC_ENDPOINTS

        if endpoint in PUBLIC_ENDPOINTS:
            return True
        if endpoint == "admin.metrics":
            system = self.gateway.extensions.get("leasegate")
            return bool(system is not None and system.settings.metrics_public)
        return False

    def _complete(self, operation: dict[str, Any], method: str, path: str, *,
                  json_body: bool, querystring: bool, public: bool,
                  envelope: dict[str, Any]) -> None:
        key = (method, path)
        responses: dict[str, Any] = {str(code): value
                                     for code, value in operation["responses"].items()}
        for response in responses.values():
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            if schema == envelope:
                response["content"]["application/json"]["schema"] = dict(ERROR_REF)

        parameters: list[dict[str, Any]] = operation["parameters"]
        for parameter in parameters:
            if parameter["in"] == "path":
                parameter["schema"] = self._path_schema(key, parameter["name"])
        path_ids = {p["name"] for p in parameters if p["in"] == "path"}

        if json_body:
            operation["requestBody"]["required"] = True
        if key in SUBMITS and "201" in responses:
            _replay_documented(responses)
        self._not_json(key, operation, responses, parameters)
        has_body = json_body or "requestBody" in operation
        self._refusals(key, responses, has_body=has_body, json_body=json_body,
                       querystring=querystring, path_ids=path_ids, public=public)
        for code, response in responses.items():
            if not response.get("description"):
                response["description"] = HTTPStatus(int(code)).phrase + "."
        operation["responses"] = {code: responses[code] for code in sorted(responses)}
        if public:
            operation["security"] = []

    def _not_json(self, key: tuple[str, str], operation: dict[str, Any],
                  responses: dict[str, Any], parameters: list[dict[str, Any]]) -> None:
        """The routes whose body or answer is not JSON: metrics, the event stream and
        artifacts (quart-schema knows only JSON)."""
        if key == ("get", "/metrics"):
            responses.setdefault("200", {
                "description": "The Prometheus text exposition format "
                               "(`text/plain; version=0.0.4`).",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            })
        elif key == ("get", "/v1/events"):
            responses["200"] = {
                "description": "Server-Sent Events: `event: job` (`id:` the event id, `data:` "
                               "the event as JSON), `event: reset` (`data: {\"reason\"}`: "
                               "missed events, re-read) and `: keep-alive` comments; the "
                               "stream ends after `max_wait_seconds` (reconnect with "
                               "`Last-Event-ID`).",
                "content": {"text/event-stream": {"schema": SSE_MESSAGE}},
            }
            parameters.append({"name": "Last-Event-ID", "in": "header", "required": False,
                               "description": "Resume after this event id.",
                               "schema": {"type": "integer", "minimum": 0,
                                          "maximum": 2**63 - 1}})
        elif key in (("delete", "/v1/schedules/{schedule_id}"),
                     ("delete", "/v1/webhooks/{endpoint_id}")):
            responses.setdefault("204", {"description": "Deleted (no body)."})
        elif key == ("get", ARTIFACT_PATH):
            responses.setdefault("200", {
                "description": "The artifact's bytes.",
                "headers": {
                    "X-Artifact-Sha256": {"description": "SHA-256 of the bytes, hex.",
                                          "schema": {"type": "string"}},
                    "Content-Disposition": {"description": "`attachment` with the name.",
                                            "schema": {"type": "string"}},
                },
                "content": {"application/octet-stream": {"schema": dict(BINARY)}},
            })
        elif key == ("put", ARTIFACT_PATH):
            operation["requestBody"] = {
                "description": "The artifact's raw bytes (at most `max_artifact_bytes`, "
                               "64 MiB by default).",
                "required": True,
                "content": {"application/octet-stream": {"schema": dict(BINARY)}},
            }
            parameters.extend([
                {"name": "X-Worker-Id", "in": "header", "required": True,
                 "description": "The worker holding the task's lease.",
                 "schema": dict(ID_SCHEMA)},
                {"name": "X-Lease-Token", "in": "header", "required": True,
                 "description": "The lease token from the lease reply.",
                 "schema": {"type": "string", "minLength": 1, "maxLength": 128}},
            ])
            responses.setdefault("409", self._error(ARTIFACT_CONFLICT))
            responses.setdefault("413", self._error(TOO_LARGE_ARTIFACT))

    def _refusals(self, key: tuple[str, str], responses: dict[str, Any], *, has_body: bool,
                  json_body: bool, querystring: bool, path_ids: set[str],
                  public: bool) -> None:
        """Every error the server may answer the route with, each saying when."""
        errors: dict[str, str] = {}
        errors["400"] = self._bad_request(key, has_body=has_body, json_body=json_body,
                                          querystring=querystring, path_ids=path_ids)
        if has_body:
            errors["408"] = TOO_SLOW
            errors["413"] = TOO_LARGE
        if path_ids and key not in NEVER_MISSING:
            errors["404"] = self._not_found(key[0], path_ids)
        if not public:
            errors.update({str(code): text for code, text in AUTH_ERRORS.items()})
            errors["429"] = TOO_MANY.get(key, AUTH_ERRORS[429])
        else:
            errors["429"] = ADDRESS_LIMITED
        errors["503"] = UNAVAILABLE + UNAVAILABLE_BY_ROUTE.get(key, "")
        if key in READS:
            errors["405"] = ROUTE_NAME
        for code, text in errors.items():
            documented = responses.setdefault(code, self._error(text))
            if not documented.get("description"):  # a route's document_response: say why
                documented["description"] = text
        for code in ("429", "503"):
            if code in responses:
                responses[code].setdefault("headers", {})["Retry-After"] = {
                    "description": "Seconds to wait before the next request.",
                    "schema": {"type": "integer", "minimum": 1},
                }
        if "402" in responses and not responses["402"].get("description"):
            responses["402"]["description"] = SHORT_FUNDS
        if "422" in responses and not responses["422"].get("description"):
            responses["422"]["description"] = LEDGER_LIMITS[key]
        if "409" in responses and not responses["409"].get("description"):
            responses["409"]["description"] = self._conflict(key)

    @staticmethod
    def _path_schema(key: tuple[str, str], name: str) -> dict[str, Any]:
        """A path parameter's schema: the rule the server checks it by."""
        if name == "name":
            return {"type": "string", "pattern": ARTIFACT_NAME_PATTERN}
        if name == "account" and key[1].endswith("/credit"):
            return dict(TENANT_ACCOUNT)
        if key in READS:
            return {**ID_SCHEMA, "not": {"enum": list(RESERVED_JOB_IDS)}}
        return dict(ID_SCHEMA) if name in PATH_IDS else {"type": "string"}

    @staticmethod
    def _error(description: str) -> dict[str, Any]:
        return {"description": description,
                "content": {"application/json": {"schema": dict(ERROR_REF)}}}

    @staticmethod
    def _bad_request(key: tuple[str, str], *, has_body: bool, json_body: bool,
                     querystring: bool, path_ids: set[str]) -> str:
        """Every route refuses unknown query parameters; the rest depends on what it takes."""
        reasons = [BAD_QUERY + (" or a query value outside its rules" if querystring else "")]
        if json_body:
            reasons.append(BAD_BODY)
        elif has_body and key != ("put", ARTIFACT_PATH):
            reasons.append(BAD_OPTIONAL_BODY)
        reasons += [BAD_PATH[name] for name in sorted(path_ids) if name in BAD_PATH]
        if key in BAD_OTHERWISE:
            reasons.append(BAD_OTHERWISE[key])
        if len(reasons) > 1:
            reasons[-1] = "or " + reasons[-1]
        joined = ", ".join(reasons) if len(reasons) > 2 else " ".join(reasons)
        return f"invalid_request (4000): {joined}."

    @staticmethod
    def _not_found(method: str, path_ids: set[str]) -> str:
        if "name" in path_ids and method == "get":
            return ("task_not_found (6001) or artifact_not_found (6009): no such task for "
                    "this tenant, or no such artifact.")
        for name in ("task_id", "query_id", "key_id", "schedule_id"):
            if name in path_ids:
                return NOT_FOUND[name]
        if "account" in path_ids:
            return "not_found (4040): a client key asked for another tenant's account."
        return "not_found (4040)."

    @staticmethod
    def _conflict(key: tuple[str, str]) -> str:
        if key in CONFLICTS:
            return CONFLICTS[key]
        action = key[1].rsplit("/", 1)[-1]
        if key[1].startswith("/v1/tasks/{task_id}"):
            return TASK_CONFLICTS.get(action, LEASE_CONFLICT)
        return "A conflict with the current state; see `error.code`."


def _replay_documented(responses: dict[str, Any]) -> None:
    """A submit's 201 (created) and 200 (an identical replay)."""
    responses["201"]["description"] = "Created (`created: true`)."
    replay = copy.deepcopy(responses["201"])
    replay["description"] = ("An identical replay of an earlier submit: the existing "
                             "item, `created: false`; for an item purged within "
                             "`id_tombstone_retention`, its final status.")
    responses.setdefault("200", replay)
