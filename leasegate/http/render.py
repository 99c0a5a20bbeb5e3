"""Actor replies to JSON: the one place the API's wire format is decided.

Replies are frozen dataclasses (and tuples of them); a field annotated
``Instant`` becomes an ISO 8601 UTC timestamp, tuples become lists, payloads
(already JSON) pass through::

    to_json(TaskSubmitted("t1", "queued", True))
    # {"task_id": "t1", "status": "queued", "created": True}
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from leasegate.actors.views import INSTANT
from leasegate.clock import iso


def to_json(value: object) -> Any:
    """``value`` as JSON-able Python: dicts, lists, strings, numbers, bools, None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: convert(getattr(value, name)) for name, convert in _plan(type(value))}
    if isinstance(value, tuple | list):
        return [to_json(item) for item in value]
    return value


def _instant(value: object) -> str | None:
    return iso(value) if isinstance(value, int | float) else None


@cache
def _plan(cls: type) -> tuple[tuple[str, Callable[[object], Any]], ...]:
    """How each field of ``cls`` is rendered; worked out once per class."""
    return tuple((field.name, _instant if _is_instant(field.type) else to_json)
                 for field in dataclasses.fields(cls))


def _is_instant(hint: object) -> bool:
    """``Instant`` or ``Instant | None``: as a string (postponed annotations, which
    every module of ours uses) or as the evaluated ``Annotated`` type."""
    if isinstance(hint, str):
        return hint in ("Instant", "Instant | None", "None | Instant")
    if typing.get_origin(hint) is typing.Annotated:
        return INSTANT in typing.get_args(hint)[1:]
    return any(_is_instant(arg) for arg in typing.get_args(hint))
