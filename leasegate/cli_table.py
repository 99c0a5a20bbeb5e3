"""Output of the command line's inspecting commands: aligned tables for people, JSON for
scripts, and the two ways a command ends badly."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

MAX_CELL = 40  # a table cell's most characters (the whole value: ``show`` or ``--json``)


class UsageError(Exception):
    """Bad arguments (exit status 2)."""


class CommandFailed(Exception):
    """It could not be done (exit status 1)."""


def when(value: Any) -> str:
    """An API timestamp as a table shows it: ``2026-11-30 08:00:00`` (UTC)."""
    if not isinstance(value, str):
        return "" if value is None else str(value)
    return value.replace("T", " ").removesuffix("Z")


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
