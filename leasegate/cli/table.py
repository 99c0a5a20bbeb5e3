"""Output of the command line's inspecting commands: aligned tables for people, JSON for
scripts, and the two ways a command ends badly."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8470"
MAX_CELL = 40  # a table cell's most characters (the whole value: ``show`` or ``--json``)


class UsageError(Exception):
    """Bad arguments (exit status 2)."""


class CommandFailed(Exception):
    """It could not be done (exit status 1)."""


def gateway_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--url``, ``--key`` and ``--json`` of every command on a running gateway."""
    parser.add_argument("--url", default=os.environ.get("LEASEGATE_URL", DEFAULT_URL),
                        help="the gateway (default: $LEASEGATE_URL or %(default)s)")
    parser.add_argument("--key", default=None,
                        help="an admin key (default: $LEASEGATE_ADMIN_KEY)")
    parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    return parser


def path_id(name: str) -> str:
    """An id or site as one path segment (``/``, ``?`` and ``#`` escaped)."""
    from urllib.parse import quote

    return quote(name, safe="")


def when(value: Any) -> str:
    """An API timestamp as every command shows it: ``2026-11-30 08:00:00 UTC`` (the
    console's format too)."""
    if not isinstance(value, str):
        return "" if value is None else str(value)
    return value.replace("T", " ").removesuffix("Z") + " UTC"


def _cell(name: str, value: Any) -> str:
    text = when(value) if name.endswith("_at") else ("" if value is None else str(value))
    text = " ".join(text.split())  # one line a row
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
    """``rows`` as an aligned table of ``columns`` ((field, heading), ...)."""
    cells = [[heading for _, heading in columns]]
    cells += [[_cell(name, row.get(name)) for name, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))
