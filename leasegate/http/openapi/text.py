"""What ``/docs`` shows of each operation: the section (tag) it sits in, its summary
and description, in Markdown.

- Sections by what an operation acts on (:data:`TAGS`, in the order shown), worked out
  from its method and path (:func:`tag_of`), so that a new route lands in the section
  of its neighbours.
- A summary is the first full sentence of the view's docstring (quart-schema takes the
  first line, which a wrapped docstring cuts mid-sentence); the rest is the
  description.
- Docstrings are reStructuredText, where Swagger UI renders Markdown: a literal in
  double backticks would show its backticks; it gets single ones
  (:func:`as_markdown`, over every description of the document).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

# (name, description), in the order /docs shows them.
TAGS = (
    ("tasks", "Irreversible writes, delivered at most once: submit, read, list, cancel, "
              "pause and resume (client)."),
    ("queries", "Reads, redelivered until answered: submit, read and list (client)."),
    ("workers", "The worker's side of both channels: lease, start, renew and report; "
                "the workers seen."),
    ("artifacts", "Files a task's worker uploads, and their reads."),
    ("events", "Live job events (Server-Sent Events) and each job's history."),
    ("devices", "The devices tasks are bound to: heartbeats and their state."),
    ("ledger", "The double-entry books: accounts, credits, journal lines, holds, audit."),
    ("sites", "Sites: their queued work, pause, resume and throttle."),
    ("operator", "An admin's repairs: retry, redrive and reclaim jobs."),
    ("schedules", "Cron schedules that submit a task or query at each fire: create or "
                  "replace, read, list, pause, resume, trigger and delete."),
    ("webhooks", "Endpoints that are POSTed job events as they happen (signed), and "
                 "their deliveries: create, read, list, change, rotate the secret, "
                 "retry a delivery, delete."),
    ("admin", "Keys and backups (admin)."),
    ("monitoring", "Health and Prometheus metrics."),
)
# Path prefixes that name their section outright (the first that fits).
PREFIX_TAGS = (
    ("/v1/admin/", "admin"), ("/v1/ledger/", "ledger"), ("/v1/devices", "devices"),
    ("/v1/sites", "sites"), ("/v1/events", "events"), ("/v1/workers", "workers"),
    ("/health", "monitoring"), ("/metrics", "monitoring"),
)
# A job route's last segment that makes it a worker's or an operator's call.
WORKER_ACTIONS = {"lease", "start", "renew", "result", "results"}
OPERATOR_ACTIONS = {"retry", "redrive", "reclaim"}

# What a path's variable names.
PATH_PARAMETERS = {
    "task_id": "The task's id.",
    "query_id": "The query's id.",
    "key_id": "The key's id (not its secret).",
    "device_id": "The device's id.",
    "account": "The ledger account (a tenant's account is named as the tenant).",
    "site": "The site's id.",
    "name": "The artifact's name.",
    "schedule_id": "The schedule's id.",
    "endpoint_id": "The webhook endpoint's id.",
    "delivery_id": "The delivery's id (the `webhook-id` header of each of its attempts).",
}

_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_TEXT_KEYS = ("description", "summary")


def sections(paths: dict[str, Any]) -> list[dict[str, str]]:
    """The document's ``tags``: :data:`TAGS`, then any other section an operation of
    ``paths`` names (a new resource's, until it is described here)."""
    declared = [{"name": name, "description": text} for name, text in TAGS]
    known = {name for name, _ in TAGS}
    used = {tag for item in paths.values() for operation in item.values()
            for tag in operation.get("tags", ())}
    return declared + [{"name": name} for name in sorted(used - known)]


def tag_of(method: str, path: str) -> str:
    """The section of ``method path`` (a path as the document writes it)."""
    for prefix, tag in PREFIX_TAGS:
        if path.startswith(prefix):
            return tag
    segments = path.strip("/").split("/")
    if "artifacts" in segments:
        return "artifacts"
    if segments[-1] == "events":
        return "events"
    if segments[-1] in WORKER_ACTIONS and method == "post":
        return "workers"
    if segments[-1] in OPERATOR_ACTIONS:
        return "operator"
    # /v1/tasks..., /v1/queries..., and a new resource of its own (/v1/<resource>).
    return segments[1] if len(segments) > 1 and segments[0] == "v1" else segments[0]


def describe(operation: dict[str, Any], method: str, path: str, doc: str | None) -> None:
    """``operation``'s section, summary and description (from its view's ``doc``), and
    what its path variables are."""
    operation["tags"] = [tag_of(method, path)]
    for parameter in operation["parameters"]:
        if parameter["in"] == "path" and parameter["name"] in PATH_PARAMETERS:
            parameter.setdefault("description", PATH_PARAMETERS[parameter["name"]])
    summary, description = summary_and_description(doc)
    for key, text in (("summary", summary), ("description", description)):
        operation.pop(key, None)
        if text:
            operation[key] = text


def summary_and_description(doc: str | None) -> tuple[str | None, str | None]:
    """A docstring's first full sentence, and the rest (None where there is none)."""
    if not doc:
        return None, None
    text = inspect.cleandoc(doc)
    end = _first_sentence_end(text)
    summary = " ".join(text[:end].split())
    rest = text[end:].strip()
    return summary or None, rest or None


def _first_sentence_end(text: str) -> int:
    """Where the first sentence ends: a full stop (or ! ?) followed by white space or
    the end, outside parentheses and ``literals`` (so "(0–30). With" ends one,
    "(a 200 replay, 409...)" does not); the first paragraph at most."""
    depth, literal = 0, False
    for i, char in enumerate(text):
        if text.startswith("``", i):
            literal = not literal
        elif literal:
            continue
        elif char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif char in ".!?" and depth == 0 and (i + 1 == len(text) or text[i + 1].isspace()):
            return i + 1
        elif text.startswith("\n\n", i):
            return i
    return len(text)


def as_markdown(node: Any) -> None:
    """Every description and summary in ``node`` (a document, in place) with
    reStructuredText's literals (double backticks) as Markdown's (single)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in _TEXT_KEYS and isinstance(value, str):
                    item[key] = _RST_LITERAL.sub(r"`\1`", value)
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
