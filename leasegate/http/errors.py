"""Every failure as the error envelope ``{"error": {code, type, message}}``,
framework ones included."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from quart import Quart, Response, jsonify
from quart_schema import RequestSchemaValidationError
from werkzeug.exceptions import HTTPException

from leasegate.errors import (
    InvalidRequest,
    LeasegateError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
)

log = logging.getLogger("leasegate.http")


def error_response(exc: LeasegateError) -> Response:
    response = jsonify(exc.envelope())
    response.status_code = exc.status
    for name, value in exc.headers.items():
        response.headers[name.replace("_", "-")] = value
    return response


def _describe(error: Exception | None) -> str:
    if isinstance(error, ValidationError):
        parts = []
        for item in error.errors()[:5]:
            where = ".".join(str(p) for p in item.get("loc", ())) or "body"
            parts.append(f"{where}: {item.get('msg', 'invalid')}")
        return "; ".join(parts)
    if isinstance(error, TypeError | ValueError):
        return "the body must be a JSON object"
    return str(error) if error else "invalid request"


def install(app: Quart) -> None:
    @app.errorhandler(LeasegateError)
    async def domain_error(exc: LeasegateError) -> Response:
        return error_response(exc)

    @app.errorhandler(RequestSchemaValidationError)
    async def schema_error(exc: RequestSchemaValidationError) -> Response:
        return error_response(InvalidRequest(_describe(exc.validation_error)))

    @app.errorhandler(UnicodeDecodeError)
    async def undecodable(exc: UnicodeDecodeError) -> Response:
        return error_response(InvalidRequest("the body is not valid UTF-8"))

    @app.errorhandler(HTTPException)
    async def framework_error(exc: HTTPException) -> Response:
        if (exc.code or 500) >= 500:
            return await unexpected(exc)
        mapped: dict[int, Any] = {404: NotFound, 405: MethodNotAllowed, 413: PayloadTooLarge}
        cls = mapped.get(exc.code or 400, InvalidRequest)
        if exc.code == 400:
            message = "malformed request (the body must be valid JSON)"
        elif exc.code == 413:
            message = "request body too large"
        else:
            message = exc.description or cls.type
        response = error_response(cls(message))
        if exc.code == 405 and isinstance(exc, HTTPException):
            allowed = exc.get_headers()
            for name, value in allowed:
                if name.lower() == "allow":
                    response.headers["Allow"] = value
        return response

    @app.errorhandler(Exception)
    async def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error while serving a request")
        response = jsonify({"error": {"code": 5000, "type": "internal_error",
                                      "message": "internal error; see the server log"}})
        response.status_code = 500
        return response
