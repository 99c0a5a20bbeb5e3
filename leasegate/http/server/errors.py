"""Every failure as the error envelope ``{"error": {code, type, message}}``,
framework ones included."""

from __future__ import annotations

import json
import logging

from pydantic import ValidationError
from quart import Quart, Response, jsonify, request, url_for
from quart_schema import RequestSchemaValidationError
from quart_schema.validation import QuerystringValidationError, RequestHeadersValidationError
from werkzeug.exceptions import HTTPException

from leasegate.errors import (
    InvalidRequest,
    LeasegateError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
)
from leasegate.http.routes.artifacts import body_limit_setting
from leasegate.http.server.auth import BEARER

log = logging.getLogger("leasegate.http")


def error_response(exc: LeasegateError) -> Response:
    response = jsonify(exc.envelope())
    response.status_code = exc.status
    for name, value in exc.headers.items():
        response.headers[name.replace("_", "-")] = value
    if exc.status == 401 and "WWW-Authenticate" not in response.headers:
        response.headers["WWW-Authenticate"] = BEARER  # every 401 says how to authenticate
    if exc.status == 503 and "Retry-After" not in response.headers:
        # Storage trouble or a draining actor: worth a retry soon, as documented.
        response.headers["Retry-After"] = "1"
    return response


def describe_error(error: Exception | None) -> str:
    if isinstance(error, ValidationError):
        parts = []
        for item in error.errors()[:5]:
            where = ".".join(str(p) for p in item.get("loc", ())) or "body"
            parts.append(f"{where}: {item.get('msg', 'invalid')}")
        return "; ".join(parts)
    if isinstance(error, TypeError | ValueError):
        return "the body must be a JSON object"
    return str(error) if error else "invalid request"


def _not_json() -> str:
    given = request.headers.get("Content-Type")
    sent = f"Content-Type {given!r}" if given else "no Content-Type"
    return f"the body must be JSON sent with Content-Type: application/json (got {sent})"


def _malformed(exc: HTTPException) -> str:
    """Quart raises a bare BadRequest while handling the parser's error: say that one."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, json.JSONDecodeError):
        return f"the body is not valid JSON: {cause}"
    if isinstance(cause, ValueError):  # e.g. the JSON provider's "nested too deeply"
        return str(cause)
    return "malformed request"


def _too_large() -> str:
    limit = request.max_content_length
    if limit is None:
        return "the request body is too large"
    setting = body_limit_setting(request.method, request.path)
    return f"the request body is over this route's limit of {limit} bytes ({setting})"


# A path is the caller's own text: shown in a message up to this many characters.
SHOWN_PATH = 200


def _request_line(method: str, path: str) -> str:
    shown = path if len(path) <= SHOWN_PATH else path[:SHOWN_PATH] + "…"
    return f"{method} {shown}"


def no_route(method: str, path: str) -> LeasegateError:
    """A path that names no route: say which, and where the routes are."""
    return NotFound(f"{_request_line(method, path)}: no such route; the API's routes are "
                    f"listed at {url_for('docs.page')}")


def wrong_method(method: str, path: str, allowed: str) -> LeasegateError:
    """A route that takes other methods: which ones (also in ``Allow``)."""
    return MethodNotAllowed(f"{_request_line(method, path)}: this route takes {allowed} "
                            f"only; see {url_for('docs.page')}", Allow=allowed)


def concrete_methods(app: Quart, path: str) -> set[str] | None:
    """The methods of the route written exactly as ``path`` (no variables), if any."""
    concrete: dict[str, set[str]] | None = app.extensions.get("leasegate.concrete_paths")
    if concrete is None:
        concrete = {}
        for rule in app.url_map.iter_rules():
            if not rule.arguments:
                concrete.setdefault(rule.rule, set()).update(rule.methods or ())
        app.extensions["leasegate.concrete_paths"] = concrete
    return concrete.get(path)


def install(app: Quart) -> None:
    @app.errorhandler(LeasegateError)
    async def domain_error(exc: LeasegateError) -> Response:
        return error_response(exc)

    @app.errorhandler(RequestSchemaValidationError)
    async def schema_error(exc: RequestSchemaValidationError) -> Response:
        # Quart does not even read a body as JSON without the content type.
        body = not isinstance(exc, QuerystringValidationError | RequestHeadersValidationError)
        if body and not request.is_json:
            return error_response(InvalidRequest(_not_json()))
        return error_response(InvalidRequest(describe_error(exc.validation_error)))

    @app.errorhandler(UnicodeDecodeError)
    async def undecodable(exc: UnicodeDecodeError) -> Response:
        return error_response(InvalidRequest("the body is not valid UTF-8"))

    @app.errorhandler(HTTPException)
    async def framework_error(exc: HTTPException) -> Response:
        if (exc.code or 500) >= 500:
            return await unexpected(exc)
        if exc.code == 404:
            return error_response(no_route(request.method, request.path))
        if exc.code == 405:
            concrete = concrete_methods(app, request.path)
            if concrete is not None:  # not the methods of a {id} route the path also fits
                allowed = ", ".join(sorted(concrete))
            else:
                allowed = ", ".join(value for name, value in exc.get_headers()
                                    if name.lower() == "allow")
            return error_response(wrong_method(request.method, request.path, allowed))
        if exc.code == 400:
            return error_response(InvalidRequest(_malformed(exc)))
        if exc.code == 413:
            return error_response(PayloadTooLarge(_too_large()))
        return error_response(InvalidRequest(exc.description or InvalidRequest.type))

    @app.errorhandler(Exception)
    async def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error while serving a request")
        response = jsonify({"error": {"code": 5000, "type": "internal_error",
                                      "message": "internal error; see the server log"}})
        response.status_code = 500
        return response
