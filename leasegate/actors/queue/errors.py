"""What a worker reports with an outcome, checked the same on both channels: the
result, the error (its code and message, and the exception's ``type`` and a bounded
``traceback``) and the cost."""

from __future__ import annotations

from typing import Final

from leasegate.actors.checks import (
    INT32,
    MAX_AMOUNT,
    MAX_TEXT,
    check_int,
    check_json,
    check_text,
)

MAX_ERROR_TYPE: Final = 256
"""The longest exception type name taken (characters)."""
MAX_TRACEBACK: Final = 8192
"""The longest traceback taken (characters; the SDK cuts its at 8 KiB of UTF-8)."""


def check_report(result: object, error_code: int | None, error_message: str | None,
                 error_type: str | None, error_traceback: str | None,
                 cost: int | None) -> str | None:
    """A result message's report beside its outcome (``TaskResult``, ``QueryResult``):
    the result's text as stored (canonical JSON; None for none)."""
    text = check_json("result", result)
    check_int("error.code", error_code, -INT32 - 1, INT32, optional=True)
    check_text("error.message", error_message, optional=True, most=MAX_TEXT)
    check_error_detail(error_type, error_traceback)
    check_int("cost", cost, 0, MAX_AMOUNT, optional=True)
    return text


def check_error_detail(error_type: str | None, traceback: str | None) -> None:
    check_text("error.type", error_type, optional=True, most=MAX_ERROR_TYPE, empty=False)
    check_text("error.traceback", traceback, optional=True, most=MAX_TRACEBACK)


def detail_digest(error_type: str | None, traceback: str | None) -> tuple[str, ...]:
    """The parts a result's digest takes of the detail: none when there is none, so a
    retry of a result stored without it still matches its digest."""
    if error_type is None and traceback is None:
        return ()
    return (error_type or "", traceback or "")
