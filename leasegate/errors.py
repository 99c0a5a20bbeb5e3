"""Domain errors: values with stable codes, mapped to HTTP at the edge."""

from __future__ import annotations

from typing import Any, ClassVar


class LeasegateError(Exception):
    """Base of every error a caller can be told about.

    Subclasses fix ``code``, ``type`` and ``status``; the message is free text
    for humans. Actors raise these inside a message's savepoint, which rolls
    back that message alone and sends the error back as the reply.
    """

    code: ClassVar[int] = 4000
    type: ClassVar[str] = "invalid_request"
    status: ClassVar[int] = 400

    def __init__(self, message: str = "", **headers: str) -> None:
        super().__init__(message or self.type.replace("_", " "))
        self.message = message or self.type.replace("_", " ")
        self.headers = headers

    def envelope(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "type": self.type, "message": self.message}}


def _error(name: str, code: int, type_: str, status: int) -> type[LeasegateError]:
    cls = type(name, (LeasegateError,), {"code": code, "type": type_, "status": status})
    cls.__module__ = __name__
    return cls


InvalidRequest = _error("InvalidRequest", 4000, "invalid_request", 400)
Unauthorized = _error("Unauthorized", 4010, "unauthorized", 401)
Forbidden = _error("Forbidden", 4030, "forbidden", 403)
NotFound = _error("NotFound", 4040, "not_found", 404)
MethodNotAllowed = _error("MethodNotAllowed", 4050, "method_not_allowed", 405)
RequestTimeout = _error("RequestTimeout", 4080, "request_timeout", 408)
PayloadTooLarge = _error("PayloadTooLarge", 4130, "payload_too_large", 413)
RateLimited = _error("RateLimited", 4290, "rate_limited", 429)
Unavailable = _error("Unavailable", 5030, "unavailable", 503)
InternalError = _error("InternalError", 5000, "internal_error", 500)
TaskNotFound = _error("TaskNotFound", 6001, "task_not_found", 404)
TaskLeaseInvalid = _error("TaskLeaseInvalid", 6002, "task_lease_invalid", 409)
StateConflict = _error("StateConflict", 6003, "state_conflict", 409)
IdempotencyConflict = _error("IdempotencyConflict", 6004, "idempotency_conflict", 409)
QueryNotFound = _error("QueryNotFound", 6005, "query_not_found", 404)
QueryLeaseInvalid = _error("QueryLeaseInvalid", 6006, "query_lease_invalid", 409)
InsufficientFunds = _error("InsufficientFunds", 6007, "insufficient_funds", 402)
DeviceLimit = _error("DeviceLimit", 6008, "device_limit", 429)
ArtifactNotFound = _error("ArtifactNotFound", 6009, "artifact_not_found", 404)
# An amount past a ledger bound (ledger_max_amount, ledger_max_balance): the request is
# well formed, but the ledger will not keep a sum that could leave 64-bit integers.
LedgerLimit = _error("LedgerLimit", 6010, "ledger_limit", 422)

ALL_ERRORS: tuple[type[LeasegateError], ...] = (
    InvalidRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, RequestTimeout,
    PayloadTooLarge,
    RateLimited, Unavailable, InternalError, TaskNotFound, TaskLeaseInvalid, StateConflict,
    IdempotencyConflict, QueryNotFound, QueryLeaseInvalid, InsufficientFunds, DeviceLimit,
    ArtifactNotFound, LedgerLimit,
)  # fmt: skip
