"""Write the SDK's reply types, ``leasegate/client/_types.py``, from ``/openapi.json``.

    python scripts/sync_types.py          # write the module again
    python scripts/sync_types.py --check  # exit 1 if it is not what this would write

The document is the server's, built in-process (no server runs): each reply's schema
comes from the dataclass the route renders, so the SDK's ``Task`` is the server's
``TaskView`` as the wire has it. :data:`REPLIES` names the SDK's types by the route
that answers them; the objects they refer to (``#/components/schemas/...``) become
TypedDicts of their own, under their component's name. The SDK imports nothing of
the server: this script is where the two meet.
"""

from __future__ import annotations

import argparse
import json
import keyword
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "leasegate" / "client" / "_types.py"
REF = "#/components/schemas/"

# The SDK's name of each reply: the route, the status, and (for a page's items) the
# field whose items it is.
REPLIES: dict[str, tuple[str, str, str, str | None]] = {
    "TaskSubmitted": ("post", "/v1/tasks", "201", None),
    "QuerySubmitted": ("post", "/v1/queries", "201", None),
    "Task": ("get", "/v1/tasks/{task_id}", "200", None),
    "Query": ("get", "/v1/queries/{query_id}", "200", None),
    "Account": ("get", "/v1/ledger/accounts/{account}", "200", None),
    "Entry": ("get", "/v1/ledger/accounts/{account}/entries", "200", "items"),
    "DeviceHeartbeat": ("post", "/v1/devices/{device_id}/heartbeat", "200", None),
}
# ``Page[T]``: a list reply, its ``items`` of any of the types above.
PAGE = ("get", "/v1/workers", "200")

HEADER = """\
# Generated from /openapi.json by scripts/sync_types.py: do not edit.
\"\"\"The shapes of the gateway's replies, as TypedDicts over plain JSON dicts.

Timestamps are ISO 8601 UTC strings (``2026-11-30T08:00:00Z``).
\"\"\"

from __future__ import annotations

from typing import Any, Generic, Literal, NotRequired, TypedDict, TypeVar

JSONObject = dict[str, Any]

T = TypeVar("T")
"""


async def _document() -> dict[str, Any]:
    from leasegate.http.app import create_app
    from leasegate.settings import Settings
    from leasegate.system import new_system

    with tempfile.TemporaryDirectory() as scratch:
        app = create_app(new_system(Path(scratch) / "leasegate.db", Settings()))
        async with app.app_context():
            schema: dict[str, Any] = app.extensions["QUART_SCHEMA"].openapi_provider.schema()
            return schema


def document() -> dict[str, Any]:
    """``/openapi.json`` as the gateway serves it with its default settings."""
    return trio.run(_document)


class Writer:
    """TypedDicts of a document's schemas, each written once, referred ones first."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.components: dict[str, Any] = document["components"]["schemas"]
        self.classes: dict[str, str] = {}

    def typed_dict(self, name: str, schema: dict[str, Any], doc: str,
                   generic_items: bool = False) -> None:
        required = set(schema.get("required", ()))
        lines = [f"class {name}(TypedDict{', Generic[T]' if generic_items else ''}):",
                 textwrap.indent(f'"""{doc}"""', "    "), ""]
        for field, prop in schema["properties"].items():
            assert field.isidentifier() and not keyword.iskeyword(field), field
            hint = "list[T]" if generic_items and field == "items" else self.hint(prop)
            if field not in required:
                hint = f"NotRequired[{hint}]"
            if "description" in prop:
                lines += textwrap.wrap(prop["description"], 92, initial_indent="    # ",
                                       subsequent_indent="    # ")
            lines.append(f"    {field}: {hint}")
        self.classes[name] = "\n".join(lines)

    def hint(self, schema: dict[str, Any]) -> str:
        """The Python type of a JSON Schema, as the document writes them."""
        if "$ref" in schema:
            name: str = schema["$ref"].removeprefix(REF)
            if name not in self.classes:
                self.classes[name] = ""  # taken: a schema referring to itself stops here
                self.typed_dict(name, self.components[name],
                                f"An object in the replies (``{REF}{name}``).")
            return name
        if "anyOf" in schema:
            return " | ".join(self.hint(option) for option in schema["anyOf"])
        if "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            return f"Literal[{', '.join(json.dumps(value) for value in values)}]"
        kind = schema.get("type")
        if kind == "array":
            return f"list[{self.hint(schema.get('items', {}))}]"
        if kind == "object":
            return "JSONObject"
        simple = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
                  "null": "None"}
        return simple.get(kind, "Any") if isinstance(kind, str) else "Any"


def _reply(document: dict[str, Any], method: str, path: str, status: str) -> dict[str, Any]:
    schema: dict[str, Any] = (document["paths"][path][method]["responses"][status]
                              ["content"]["application/json"]["schema"])
    return schema


def generated(document: dict[str, Any]) -> str:
    """The text of ``_types.py`` for ``document``."""
    writer = Writer(document)
    for name, (method, path, status, items) in REPLIES.items():
        schema = _reply(document, method, path, status)
        if items is not None:
            schema = writer.components[schema["properties"][items]["items"]["$ref"]
                                       .removeprefix(REF)]
            doc = f"An item of ``{items}`` of ``{method.upper()} {path}``."
        else:
            doc = f"Reply of ``{method.upper()} {path}``."
        writer.typed_dict(name, schema, doc)
    method, path, status = PAGE
    writer.typed_dict("Page", _reply(document, *PAGE),
                      "A list reply: ``items`` (newest first), ``total``, ``limit``, "
                      "``offset``.", generic_items=True)
    return HEADER + "".join(f"\n\n{text}\n" for text in writer.classes.values())


def _formatted(text: str) -> str:
    """``text`` as ruff leaves it (imports sorted, unused ones out)."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--fix", "--quiet", "--select", "I,F401",
         "--stdin-filename", str(TARGET), "-"],
        input=text, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"ruff refused the generated _types.py:\n{done.stderr}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if _types.py is not what this would write")
    args = parser.parse_args()
    text = _formatted(generated(document()))
    if args.check:
        if TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run python scripts/sync_types.py",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
