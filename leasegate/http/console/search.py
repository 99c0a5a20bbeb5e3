"""The console's searches of tasks and queries: the search form's query string read
with the API's own rules (``models.jobs.SearchArgs``), so a filter the page does not know is a
400 page, never silently ignored.

The form differs from the API's query string in two ways only: an empty field is off,
``id`` is the id's start (``id_prefix``), and ``since``/``until`` may be a browser's
``datetime-local`` value (``2026-11-30T08:00``) or the console's own format
(``2026-11-30 08:00:00 UTC``), both read as UTC (:func:`utc_text`).
"""

from __future__ import annotations

import re
from typing import Any, Final, TypeVar

from pydantic import ValidationError
from quart import request

from leasegate.actors.pages import Page
from leasegate.errors import InvalidRequest
from leasegate.http.models.jobs import SearchArgs
from leasegate.http.routes.jobs import search_fields

A = TypeVar("A", bound=SearchArgs)

PAGE_SIZE: Final = 50
_LOCAL_MINUTE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
_LOCAL_SECOND = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
_SHOWN = re.compile(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d(?::\d\d)?) UTC")
# What the console's pages take beside the search itself.
_PAGE_ARGS: Final = {"offset", "limit"}


def utc_text(value: str) -> str:
    """A form's time as RFC 3339: a date picker's value (no zone: the console's pickers
    are labelled UTC) or a time as the console shows it, in UTC; anything else as given
    (an RFC 3339 time with its offset, or what the caller's check refuses)."""
    if shown := _SHOWN.fullmatch(value):
        value = f"{shown[1]}T{shown[2]}"
    if _LOCAL_MINUTE.fullmatch(value):
        return value + ":00Z"
    if _LOCAL_SECOND.fullmatch(value):
        return value + "Z"
    return value


def _form_value(name: str, value: str) -> str:
    return utc_text(value) if name in ("since", "until") else value


def form_search(model: type[A]) -> tuple[A, dict[str, str]]:
    """The page's query string as ``model`` (400 on anything it does not take), and the
    form's fields given a value (to show them again)."""
    given = {name: value.strip() for name, value in request.args.items()}
    shown = {name: value for name, value in given.items() if value and name not in _PAGE_ARGS}
    args: dict[str, Any] = {}
    for name, value in given.items():
        if not value:
            continue
        key = "id_prefix" if name == "id" else name
        if key == "id_prefix" and "id_prefix" in args:
            raise InvalidRequest("give the id once (id or id_prefix)")
        args[key] = _form_value(name, value)
    try:
        return model.model_validate({"limit": PAGE_SIZE, **args}), shown
    except ValidationError as exc:
        raise InvalidRequest(_described(exc, model)) from None


def _described(error: ValidationError, model: type[SearchArgs]) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item.get("loc", ())) or "search"
        if item.get("type") == "extra_forbidden":
            parts.append(f"{where}: not a filter of this page (it takes "
                         f"{', '.join(_known_filters(model))})")
        else:
            parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


def _known_filters(model: type[SearchArgs]) -> list[str]:
    return ["id", *sorted(set(model.model_fields) - {"id_prefix"})]


def message_fields(args: SearchArgs) -> dict[str, Any]:
    """The list message's shared fields of a console search (an admin: every tenant)."""
    found = search_fields(args, None, Page(limit=args.limit, offset=args.offset))
    assert found is not None  # an admin sees every tenant
    return found
