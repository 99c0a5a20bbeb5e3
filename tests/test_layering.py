"""The house rules that a reader relies on and import-linter cannot see.

import-linter (``make test``) holds the arrows http → actors → storage (and, inside
the actors, which actor may reach which) and keeps the SDK free of the server.
These tests hold the rest: SQL lives in ``leasegate/storage`` alone, and the actor
seam is typed end to end (no ``Any`` in a ref's signatures, no ``cast`` in the
actors or where a route asks one, no handler typed ``-> object``, no
``Ask[object]``, no mixin: each actor class has one base). ``tests/typing/`` shows
mypy refusing what the seam must refuse.
"""

from __future__ import annotations

import ast
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import leasegate
from leasegate.actors.runtime.mailbox import Ref

PACKAGE = Path(leasegate.__file__).parent
SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|BEGIN|COMMIT|ROLLBACK"
                 r"|SAVEPOINT|RELEASE|PRAGMA|VACUUM) ")


def modules(*, outside: str) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if outside not in path.relative_to(PACKAGE).parts:
            yield path, ast.parse(path.read_text(), str(path))


def test_no_sql_outside_storage() -> None:
    found = []
    for path, tree in modules(outside="storage"):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and SQL.match(node.value) and " " in node.value.strip()):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value[:40]!r}")
            if isinstance(node, ast.Attribute) and node.attr in ("execute", "executemany",
                                                                 "executescript"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: .{node.attr}(")
    assert found == []


def test_the_ref_signatures_name_no_any() -> None:
    for name in ("ask", "ask_until", "tell", "tell_nowait"):
        hints = typing.get_type_hints(getattr(Ref, name))
        assert all("Any" not in repr(hint) for hint in hints.values()), (name, hints)


def test_no_cast_at_the_seam() -> None:
    """Actors and the routes that ask them. (The ASGI middleware may cast between
    hypercorn's message TypedDicts: that is no actor's business.)"""
    found = []
    for path, tree in modules(outside="client"):
        where = path.relative_to(PACKAGE).parts
        if not (where[0] == "actors" or "routes" in where
                or where[-1] in ("auth.py", "render.py")):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
                    and (getattr(node.func, "id", None) == "cast"
                         or getattr(node.func, "attr", None) == "cast")):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def _actor_modules() -> Iterator[tuple[Path, ast.Module]]:
    for path, tree in modules(outside="client"):
        if path.relative_to(PACKAGE).parts[0] == "actors":
            yield path, tree


def test_no_handler_returns_object_and_no_ask_of_object() -> None:
    found = []
    for path, tree in _actor_modules():
        for node in ast.walk(tree):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', 0)}"
            if (isinstance(node, ast.FunctionDef) and isinstance(node.returns, ast.Name)
                    and node.returns.id == "object"):
                found.append(f"{where}: {node.name} -> object")
            if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                    and node.value.id == "Ask" and "object" in ast.unparse(node.slice)):
                found.append(f"{where}: {ast.unparse(node)}")
    assert found == []


def test_no_mixins_in_the_actors() -> None:
    """A class of the actors has one base (besides ``Generic``/``Protocol``): what a
    handler depends on is its turn context's type, never a sibling class's members."""
    found = []
    for path, tree in _actor_modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [b for b in node.bases
                     if ast.unparse(b).split("[", 1)[0] not in ("Generic", "Protocol")]
            if len(bases) > 1:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.name}")
    assert found == []


def test_every_refused_line_of_the_typing_checks_names_its_error() -> None:
    """``tests/typing`` holds lines mypy must refuse; each says which error it expects
    (a bare ``# type: ignore`` would hide any error, and so prove nothing)."""
    seam = Path(__file__).parent / "typing" / "seam.py"
    ignores = re.findall(r"# type: ignore(\[[a-z-]+\])?$", seam.read_text(), re.MULTILINE)
    assert len(ignores) >= 10 and all(ignores)
