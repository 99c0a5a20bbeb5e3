"""The house rules that a reader relies on and import-linter cannot see.

import-linter (``make test``) holds the arrows http → actors → storage and keeps
the SDK free of the server. These tests hold the rest: SQL lives in
``leasegate/storage`` alone, and the actor seam is typed end to end (no ``Any``
in the mailbox's signatures, no ``cast`` in the actors or where a route asks one).
"""

from __future__ import annotations

import ast
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import leasegate
from leasegate.actors.mailbox import Mailbox

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


def test_the_mailbox_signatures_name_no_any() -> None:
    for name in ("ask", "ask_parked", "tell", "tell_nowait"):
        hints = typing.get_type_hints(getattr(Mailbox, name))
        assert all("Any" not in repr(hint) for hint in hints.values()), (name, hints)


def test_no_cast_at_the_seam() -> None:
    """Actors and the routes that ask them. (The ASGI middleware may cast between
    hypercorn's message TypedDicts: that is no actor's business.)"""
    found = []
    for path, tree in modules(outside="client"):
        where = path.relative_to(PACKAGE).parts
        if not (where[0] == "actors" or where[-1].startswith(("routes_", "auth", "render"))):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
                    and (getattr(node.func, "id", None) == "cast"
                         or getattr(node.func, "attr", None) == "cast")):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []
