"""Batch routes' edges: each item validated on its own, each answered on its own.

The envelope (``{"items": [...]}``, 1..100 items) is validated by the route's
model; an item is validated here with the single route's model, so a bad item
is that item's 400 (the single route's message) and never the whole call's.
The reply is always 200 with ``{"items": [...]}`` in request order, each entry
``{"status": <what it would have been alone>, "<noun>": {...}}`` or
``{"status": <4xx/5xx>, "error": {"code", "type", "message"}}``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from quart_schema import validate_request

from leasegate.actors.channels import JobQueue
from leasegate.actors.jobs.channel import JobChannel, JobView
from leasegate.actors.runtime.mailbox import Ask, Message
from leasegate.errors import InvalidRequest, LeasegateError
from leasegate.http.models.replies import answers
from leasegate.http.server.auth import SUBMITTER_ONLY, allow, require_tenant
from leasegate.http.server.context import system
from leasegate.http.server.errors import describe_error
from leasegate.http.server.render import to_json

B = TypeVar("B", bound=BaseModel)
T = TypeVar("T")
A = TypeVar("A", bound=JobQueue)
M = TypeVar("M", bound=Message)
V = TypeVar("V", bound=JobView)
F = TypeVar("F", bound=Callable[..., Any])


def each_item(model: type[B], raw: Sequence[Any],
              build: Callable[[B], T]) -> list[T | LeasegateError]:
    """Every raw item validated with ``model`` and turned into a message by ``build``
    (which may refuse it with a :class:`LeasegateError`, e.g. a 413 JSON field)."""
    built: list[T | LeasegateError] = []
    # model_validate's own checks (of its keyword arguments) cost a microsecond an
    # item; the validator it calls is the same.
    validate: Callable[[Any], B] = model.__pydantic_validator__.validate_python
    for item in raw:
        try:
            built.append(build(validate(item)))
        except ValidationError as exc:
            built.append(InvalidRequest(describe_error(exc)))
        except LeasegateError as exc:
            built.append(exc)
    return built


def each_body(model: type[B], raw: Sequence[Any],
              build: Callable[[B, int], T]) -> list[T | LeasegateError]:
    """:func:`each_item` for the items of a job batch: ``build(body, limit)`` checks the
    body's JSON fields against ``max_json_field_bytes``, read once, not per item."""
    limit = system().settings.max_json_field_bytes
    return each_item(model, raw, lambda body: build(body, limit))


async def each_reported(noun: str, channel: JobChannel[A, Any, V],
                        batch: Callable[[tuple[M, ...]], Ask[A, tuple[V | LeasegateError, ...]]],
                        model: type[B], raw: Sequence[Any],
                        build: Callable[[B, int], M]) -> dict[str, Any]:
    """``POST /v1/<jobs>/results``: each item validated and built on its own, the
    taken ones sent as one ``batch``, every job in the reply with its billing."""
    return reply(noun, await channel.ask_each(batch, each_body(model, raw, build)))


def reply(noun: str, answers: Sequence[object | LeasegateError],
          status: Callable[[Any], int] = lambda _: 200,
          render: Callable[[Any], Any] = to_json) -> dict[str, Any]:
    """The batch reply: one entry per answer, in order."""
    items: list[dict[str, Any]] = []
    for answer in answers:
        if isinstance(answer, LeasegateError):
            items.append({"status": answer.status, "error": answer.envelope()["error"]})
        else:
            items.append({"status": status(answer), noun: render(answer)})
    return {"items": items}


def created(answer: Any) -> int:
    """A submit's status: 201 created, 200 an idempotent replay."""
    return 201 if answer.created else 200


def receipt(answer: Any) -> Any:
    """A submit's answer as JSON: ``site_paused: true`` only when its site is paused
    (the field is left out otherwise, so that a reply is what it always was)."""
    rendered = to_json(answer)
    if not rendered.get("site_paused"):
        rendered.pop("site_paused", None)
    return rendered


def submitted(answer: Any) -> tuple[Any, int]:
    """A single submit's reply: the job's id and status, 201 or (a replay) 200."""
    return receipt(answer), created(answer)


def submit_route(body: type[BaseModel], reply: type[Any], *, single: bool) -> Callable[[F], F]:
    """What a submit route is, below its route decorator: a client key's only (an
    admin's is refused: ``SUBMITTER_ONLY``), its ``body`` validated, its ``reply``
    documented; a ``single`` submit's 201 (created), and its refusals: 402 (the
    tenant is short), 422, 409."""
    def stack(view: F) -> F:
        view = answers(reply, 409, 422, 402, status=201)(view) if single else answers(reply)(view)
        validated: F = validate_request(body)(view)
        return allow("client", admin=False, refusal=SUBMITTER_ONLY)(validated)
    return stack


def submitter() -> str:
    """The tenant of the client key that submits (``allow`` let only such a key in)."""
    _, tenant = require_tenant("client")
    assert tenant is not None
    return tenant
