"""What a worker may say of an error beyond its code and message, the same on both
channels: the exception's ``type`` and a bounded ``traceback``."""

from __future__ import annotations

from typing import Final

from leasegate.actors.checks import check_text

MAX_ERROR_TYPE: Final = 256
"""The longest exception type name taken (characters)."""
MAX_TRACEBACK: Final = 8192
"""The longest traceback taken (characters; the SDK cuts its at 8 KiB of UTF-8)."""


def check_error_detail(error_type: str | None, traceback: str | None) -> None:
    check_text("error.type", error_type, optional=True, most=MAX_ERROR_TYPE, empty=False)
    check_text("error.traceback", traceback, optional=True, most=MAX_TRACEBACK)


def detail_digest(error_type: str | None, traceback: str | None) -> tuple[str, ...]:
    """The parts a result's digest takes of the detail: none when there is none, so a
    result without it digests as it always did."""
    if error_type is None and traceback is None:
        return ()
    return (error_type or "", traceback or "")
