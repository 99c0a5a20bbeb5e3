"""The per-class renderers of ``leasegate.http.server.render`` give what the generic walk
they replaced gave (kept here as the reference), for every reply the actors make;
``check_json_field`` answers as its walk and canonical encoding did."""

from __future__ import annotations

import dataclasses
import importlib
import json
import random
import typing
from collections.abc import Callable
from typing import Any

import pytest

from leasegate.actors.payloads import encoded_size
from leasegate.actors.tasks.views import Started, TaskView
from leasegate.actors.views import INSTANT, Billing, JobError
from leasegate.clock import iso
from leasegate.errors import LeasegateError
from leasegate.http.models.payloads import MAX_JSON_DEPTH, check_json_field
from leasegate.http.server.render import _is_instant, _is_plain, to_json

VIEW_MODULES = ("views", "queries.views", "tasks.views", "keys.views", "ledger.views",
                "devices.views", "queue.history")


def reference(value: object) -> Any:
    """The generic walk render.py had: a dataclass and conversion per field."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: (_reference_instant if _reference_is_instant(field.type)
                             else reference)(getattr(value, field.name))
                for field in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [reference(item) for item in value]
    return value


def _reference_instant(value: object) -> str | None:
    return iso(value) if isinstance(value, int | float) else None


def _reference_is_instant(hint: object) -> bool:
    if isinstance(hint, str):
        return hint in ("Instant", "Instant | None", "None | Instant")
    if typing.get_origin(hint) is typing.Annotated:
        return INSTANT in typing.get_args(hint)[1:]
    return any(_reference_is_instant(arg) for arg in typing.get_args(hint))


def _views() -> list[type]:
    found = []
    for name in VIEW_MODULES:
        module = importlib.import_module(f"leasegate.actors.{name}")
        found += [value for value in vars(module).values()
                  if isinstance(value, type) and dataclasses.is_dataclass(value)
                  and value.__module__ == module.__name__]
    return found


def _scalar(rng: random.Random) -> Any:
    return rng.choice([None, True, False, 0, 7, -3, 2**40, 1.5, 1e16, float(2**53), "",
                       "shop", "ü\n\"x", b"raw"])


def _anything(rng: random.Random, depth: int = 0) -> Any:
    """JSON, nested replies, tuples, lists: what a non-scalar field may hold."""
    pick = rng.randrange(8 if depth < 3 else 1)
    if pick == 0:
        return _scalar(rng)
    if pick == 1:
        return {"k": _anything(rng, depth + 1), "n": [1, {"deep": [2.5, None]}]}
    if pick == 2:
        return [_anything(rng, depth + 1) for _ in range(rng.randrange(3))]
    if pick == 3:
        return tuple(_anything(rng, depth + 1) for _ in range(rng.randrange(3)))
    if pick == 4:
        return JobError(rng.choice([None, 5]), "boom")
    if pick == 5:
        return Billing(10, rng.choice([None, 3]), None, "settled")
    if pick == 6:
        return (Started("t1", "running", 1796025600.5, False, True),)
    return "text"


def _instance(cls: type, rng: random.Random) -> Any:
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        if _is_instant(field.type):
            values[field.name] = rng.choice([None, 0, 1796025600, 1796025600.999, 1e9 + 0.5])
        elif _is_plain(field.type):
            values[field.name] = _scalar(rng)
        else:
            values[field.name] = _anything(rng)
    return cls(**values)


def _wire(value: Any) -> str:
    # json tells True from 1 and a list from a tuple's list, as the wire does.
    return json.dumps(value, sort_keys=True, default=repr)


@pytest.mark.parametrize("cls", _views(), ids=lambda cls: cls.__name__)
def test_every_view_renders_as_the_generic_walk_did(cls: type) -> None:
    rng = random.Random(cls.__name__)
    for _ in range(200):
        value = _instance(cls, rng)
        assert _wire(to_json(value)) == _wire(reference(value))
        assert _wire(to_json((value, [value]))) == _wire(reference((value, [value])))


def test_instants_and_payloads() -> None:
    view = TaskView("t1", "t1", "shop", "-", "echo", {"a": [1, 2]}, 0, "running", None, None,
                    None, "w1", 1796025600.7, 1, False, False, 1796025600, 1796025600,
                    None, None, None, None, None, None, None, False)
    rendered = to_json(view)
    assert rendered["lease_expires_at"] == "2026-11-30T08:00:00Z"
    assert rendered["started_at"] is None
    assert rendered["params"] is view.params  # a payload passes through, as before
    assert list(rendered) == [field.name for field in dataclasses.fields(TaskView)]


@pytest.mark.parametrize("hint, plain", [
    ("str", True), ("int | None", True), ("None | bool", True), ("float", True),
    ("None", False), ("JSONValue", False), ("tuple[str, ...]", False),
    (str, True), (int | None, True), (typing.Optional[float], True),  # noqa: UP045
    (type(None), False), (tuple[str, ...], False), (dict[str, Any], False),
])
def test_plain_hints(hint: object, plain: bool) -> None:
    assert _is_plain(hint) is plain


def test_not_dataclasses_pass_through() -> None:
    marker: Callable[[], None] = lambda: None  # noqa: E731
    assert to_json(marker) is marker
    assert to_json(Started) is Started  # a dataclass type, not an instance
    assert to_json(("a", ["b", ("c",)])) == ["a", ["b", ["c"]]]


# ---- models.payloads: one walk, and orjson's length where it is the canonical one -------

def _reference_depth(value: Any) -> int:
    """The depth walk models.payloads had."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _reference_check(name: str, value: Any, limit: int) -> str | None:
    if value is None:
        return None
    if _reference_depth(value) > MAX_JSON_DEPTH:
        return f"400 {name} is nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        size = encoded_size(value)
    except ValueError:
        return (f"400 {name} holds a value JSON cannot carry "
                "(NaN, Infinity or an unpaired surrogate)")
    return f"413 {name} is {size} bytes of JSON; the limit is {limit}" if size > limit else None


def _check(name: str, value: Any, limit: int) -> str | None:
    try:
        check_json_field(name, value, limit)
    except LeasegateError as exc:
        return f"{exc.status} {exc}"
    return None


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


class _Dict(dict[str, Any]):
    pass


JSON_FIELDS: list[Any] = [
    None, 0, "x", True, [], {}, {"a": 1}, {"b": [1, "ü", None, False]}, {"é\u2028": "\x00\x7f"},
    {"big": 2**64}, {"neg": -(2**63)}, {"f": 1.5}, {"f": 1e16}, {"f": 1e-7}, [float("nan")],
    {"inf": float("inf")}, {"s": "\ud800"}, {"\udfff": 1}, ["y" * 300], {"z": ["q" * 40] * 8},
    _nested(31), _nested(32), _nested(33), _nested(200), [_nested(32), 1], [[], [[]], [[[]]]],
    _Dict(a=1), {"t": (1, 2)},
]


@pytest.mark.parametrize("value", JSON_FIELDS, ids=[str(i) for i in range(len(JSON_FIELDS))])
@pytest.mark.parametrize("limit", [0, 10, 200, 65536])
def test_json_field_checks_answer_as_before(value: Any, limit: int) -> None:
    assert _check("params", value, limit) == _reference_check("params", value, limit)


def test_json_field_checks_on_random_documents() -> None:
    rng = random.Random(7)
    for _ in range(500):
        value = _anything_json(rng)
        for limit in (5, 60):
            assert _check("result", value, limit) == _reference_check("result", value, limit)


def _anything_json(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(4 if depth < 6 else 1)
    if pick == 0:
        return rng.choice([None, True, 0, -5, 2**70, 0.1, 1e300, "", "a\"b\\c\n", "日本",
                           "\x1f", "\ud83d"])
    if pick == 1:
        return {rng.choice(["k", "ü", "\t"]) + str(i): _anything_json(rng, depth + 1)
                for i in range(rng.randrange(4))}
    return [_anything_json(rng, depth + 1) for _ in range(rng.randrange(4))]
