"""Errors raised by the SDK: one per error code of the gateway, and transport failures."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx


class LeasegateError(Exception):
    """The gateway answered with an error envelope ``{"error": {code, type, message}}``.

    ``status`` is the HTTP status, ``code`` and ``type`` the stable error code
    and name (``6002``, ``"task_lease_invalid"``), ``message`` free
    text. Each stable code has its own subclass (:class:`TaskLeaseInvalid`,
    ...), so ``except TaskLeaseInvalid:`` and ``err.code == 6002`` are the same
    test. A reply that is not an envelope (a proxy's 502 page) gives this base
    class with ``code`` 0 and ``type`` ``"http_error"``.

    ``attempts`` is how many times the request was sent: more than one means
    an earlier attempt may have taken effect and lost its answer.
    ``retry_after`` is the ``Retry-After`` of a 429, in seconds.
    """

    def __init__(self, status: int, code: int, type: str, message: str) -> None:
        super().__init__(status, code, type, message)
        self.status = status
        self.code = code
        self.type = type
        self.message = message
        self.attempts = 1
        self.retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.status} {self.type} ({self.code}): {self.message}"


class TransportError(Exception):
    """The gateway could not be reached, or its answer was lost, after all retries.

    Connection refused, timeout, connection dropped mid-reply; the httpx
    exception is the ``__cause__``. Whether the last attempt took effect is
    unknown: every call the SDK retries is safe to repeat.
    """

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message, attempts)
        self.message = message
        self.attempts = attempts

    def __str__(self) -> str:
        return f"{self.message} (after {self.attempts} attempts)"


class InvalidRequest(LeasegateError):
    """4000 (400): the request is malformed (bad id, bad field)."""


class Unauthorized(LeasegateError):
    """4010 (401): missing or unknown key."""


class Forbidden(LeasegateError):
    """4030 (403): the key's role or sites do not allow this."""


class NotFound(LeasegateError):
    """4040 (404): no such path."""


class MethodNotAllowed(LeasegateError):
    """4050 (405)."""


class RequestTimeout(LeasegateError):
    """4080 (408): the request body arrived too slowly; nothing was done."""


class PayloadTooLarge(LeasegateError):
    """4130 (413): body over 1 MiB, or ``params``/``result``/``progress`` over 64 KiB."""


class RateLimited(LeasegateError):
    """4290 (429): slow down; ``retry_after`` says for how long. Retried by the SDK."""


class Unavailable(LeasegateError):
    """5030 (503): storage full or failing, nothing was changed. Retried by the SDK."""


class InternalError(LeasegateError):
    """5000 (500): the gateway met a bug handling this request and kept nothing of it.
    Not retried: the same request would meet the same bug."""


class TaskNotFound(LeasegateError):
    """6001 (404)."""


class TaskLeaseInvalid(LeasegateError):
    """6002 (409): wrong or old lease token, claim window passed, or the task is not ours."""


class StateConflict(LeasegateError):
    """6003 (409): the task is not in a state that allows this (e.g. cancel of a finished task)."""


class IdempotencyConflict(LeasegateError):
    """6004 (409): the same id was used before with a different payload."""


class QueryNotFound(LeasegateError):
    """6005 (404)."""


class QueryLeaseInvalid(LeasegateError):
    """6006 (409): the query was handed to someone else, finished, or the token is old."""


class InsufficientFunds(LeasegateError):
    """6007 (402): the tenant's account cannot cover ``max_cost``."""


class DeviceLimit(LeasegateError):
    """6008 (429): the device table is full of devices with live tasks."""


class ArtifactNotFound(LeasegateError):
    """6009 (404)."""


class LedgerLimit(LeasegateError):
    """6010 (422): an amount past the ledger's bounds (``ledger_max_amount`` for one credit
    or ``max_cost``, ``ledger_max_balance`` for the money ever credited)."""


ERRORS_BY_CODE: dict[int, type[LeasegateError]] = {
    4000: InvalidRequest,
    4010: Unauthorized,
    4030: Forbidden,
    4040: NotFound,
    4050: MethodNotAllowed,
    4080: RequestTimeout,
    4130: PayloadTooLarge,
    4290: RateLimited,
    5030: Unavailable,
    5000: InternalError,
    6001: TaskNotFound,
    6002: TaskLeaseInvalid,
    6003: StateConflict,
    6004: IdempotencyConflict,
    6005: QueryNotFound,
    6006: QueryLeaseInvalid,
    6007: InsufficientFunds,
    6008: DeviceLimit,
    6009: ArtifactNotFound,
    6010: LedgerLimit,
}


def error_from_response(response: httpx.Response) -> LeasegateError:
    """The exception for an error reply (status >= 400)."""
    try:
        body: Any = response.json()
        envelope = body["error"]
        code, type_, message = int(envelope["code"]), str(envelope["type"]), envelope["message"]
    except (ValueError, KeyError, TypeError):
        text = response.text[:200] if response.content else response.reason_phrase
        error = LeasegateError(response.status_code, 0, "http_error", text)
    else:
        cls = ERRORS_BY_CODE.get(code, LeasegateError)
        error = cls(response.status_code, code, type_, str(message))
    retry_after = response.headers.get("Retry-After")
    if retry_after is not None:
        with contextlib.suppress(ValueError):  # an HTTP date: ignored
            error.retry_after = max(0.0, float(retry_after))
    return error
