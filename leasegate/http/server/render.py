"""Actor replies to JSON: the one place the API's wire format is decided.

Replies are frozen dataclasses (and tuples of them); a field annotated
``Instant`` becomes an ISO 8601 UTC timestamp, tuples become lists, payloads
(already JSON) pass through::

    to_json(TaskSubmitted("t1", status="queued", created=True))
    # {"status": "queued", "created": True, "task_id": "t1"} (the wire sorts the keys)

Each dataclass's fields are sorted once (on first use) into instants, plain scalars
and the rest, so a view is rendered by one walk of that plan.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from typing import Any

from leasegate.actors.views import INSTANT
from leasegate.clock import iso

Renderer = Callable[[Any], dict[str, Any]]


def to_json(value: object) -> Any:
    """``value`` as JSON-able Python: dicts, lists, strings, numbers, bools, None."""
    cls = type(value)
    render = _RENDERERS[cls] if cls in _RENDERERS else _renderer(cls)
    if render is not None:
        return render(value)
    if isinstance(value, tuple | list):
        return [to_json(item) for item in value]
    return value


# Values to_json hands back as they are (a dict is a payload: already JSON), checked
# by exact type before the general case.
_AS_IS = frozenset({str, int, float, bool, type(None), dict})


def _value(value: object) -> Any:
    """A field that is neither an instant nor a plain scalar (payloads, nested
    replies, tuples): ``to_json``, with its commonest answers short-cut."""
    return value if type(value) in _AS_IS else to_json(value)


@functools.lru_cache(maxsize=4096)
def _iso_second(second: int) -> str | None:
    # A batch's views share a handful of seconds (created, updated, expires), and
    # datetime's strftime is ~3 µs a call.
    return iso(second)


def _instant(value: object) -> str | None:
    # iso() truncates to whole seconds itself, so the cache is keyed by the second.
    return _iso_second(int(value)) if isinstance(value, int | float) else None


# Per class, worked out once: its renderer, or None if it is not a dataclass.
_RENDERERS: dict[type, Renderer | None] = {}


def _renderer(cls: type) -> Renderer | None:
    """The renderer of instances of ``cls``, or None if it is not a dataclass (as
    ``dataclasses.is_dataclass`` decides it for an instance)."""
    if not dataclasses.is_dataclass(cls):
        _RENDERERS[cls] = None
        return None
    plan = [(field.name, _convert(field.type)) for field in dataclasses.fields(cls)]

    def render(view: Any) -> dict[str, Any]:
        return {name: getattr(view, name) if convert is None else convert(getattr(view, name))
                for name, convert in plan}

    _RENDERERS[cls] = render
    return render


def _convert(hint: object) -> Callable[[object], Any] | None:
    """What a field of type ``hint`` goes through: None for a plain scalar (as is)."""
    if _is_instant(hint):
        return _instant
    return None if _is_plain(hint) else _value


# Scalars the renderer copies without a look: the values of such fields come from
# type-checked code or SQLite columns (str, int, float, bytes, None), none of which
# to_json would change.
_PLAIN_NAMES = frozenset({"str", "int", "float", "bool"})
_PLAIN_TYPES = (str, int, float, bool)


def _is_plain(hint: object) -> bool:
    """``str``, ``int``, ``float``, ``bool``, or one of them ``| None``: as a string
    (postponed annotations) or evaluated."""
    if isinstance(hint, str):
        parts = {part.strip() for part in hint.split("|")} - {"None"}
        return bool(parts) and parts <= _PLAIN_NAMES
    if hint in _PLAIN_TYPES:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return bool(args) and all(arg in _PLAIN_TYPES for arg in args)
    return False


def _is_instant(hint: object) -> bool:
    """``Instant`` or ``Instant | None``: as a string (postponed annotations, which
    every module of ours uses) or as the evaluated ``Annotated`` type."""
    if isinstance(hint, str):
        return hint in ("Instant", "Instant | None", "None | Instant")
    if typing.get_origin(hint) is typing.Annotated:
        return INSTANT in typing.get_args(hint)[1:]
    return any(_is_instant(arg) for arg in typing.get_args(hint))
