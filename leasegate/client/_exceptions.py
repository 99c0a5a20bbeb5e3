"""A handler's exception as a worker reports it: the type, the message, and the
traceback, bounded (the gateway keeps an error's traceback to 8,192 characters)::

    {"type": "shop.errors.OutOfStock", "message": "sku-1 sold out",
     "traceback": "Traceback (most recent call last):\\n  File ..."}
"""

from __future__ import annotations

import traceback
from typing import Final

MAX_TRACEBACK_BYTES: Final = 8192
"""The most UTF-8 bytes of a traceback sent (and so at most as many characters)."""
MAX_TYPE: Final = 256
"""The longest type name the gateway takes (characters)."""


def type_name(error: BaseException) -> str:
    """``KeyError`` for a built-in exception, else ``module.QualifiedName``."""
    cls = type(error)
    name = cls.__qualname__ if cls.__module__ == "builtins" else (
        f"{cls.__module__}.{cls.__qualname__}")
    return name[:MAX_TYPE]


def bounded(text: str, limit: int = MAX_TRACEBACK_BYTES) -> str:
    """``text`` if it fits in ``limit`` UTF-8 bytes; else its first line, a line saying
    how many lines were cut, and as many of its last lines as fit (where it was raised
    and why: the part worth reading), cut at line boundaries."""
    if len(text.encode()) <= limit:
        return text
    lines = text.splitlines(keepends=True)
    # One line (an exception never raised has no traceback) is all tail; a first line
    # as long as the limit keeps its start.
    head, rest = (lines[0], lines[1:]) if len(lines) > 1 else ("", lines)
    if len(head.encode()) > limit // 2:
        head = head.encode()[:limit // 2].decode(errors="ignore") + "…\n"
    kept: list[str] = []
    room = limit - len(head.encode()) - 120  # the note's own room
    for line in reversed(rest):
        size = len(line.encode())
        if size > room:
            break
        kept.append(line)
        room -= size
    kept.reverse()
    cut = len(rest) - len(kept)
    if not kept:  # one last line longer than the whole limit: its start, cut
        tail = rest[-1].encode()[:max(room, 0)].decode(errors="ignore")
        kept, cut = [tail + "…\n"], len(rest) - 1
    note = (f"  [… {cut} line{'' if cut == 1 else 's'} cut: a traceback is sent up to "
            f"{limit} bytes …]\n")
    return head + note + "".join(kept)


def error_detail(error: BaseException) -> dict[str, str]:
    """The ``error`` of a result for ``error``: type, message and bounded traceback."""
    text = "".join(traceback.format_exception(error))
    return {"type": type_name(error), "message": str(error) or "raised without a message",
            "traceback": bounded(text)}
