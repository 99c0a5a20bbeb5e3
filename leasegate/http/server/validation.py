"""Request bodies and query strings validated by their pydantic models, as
quart-schema's decorators of the same names do, with each model's validator built
once (quart-schema builds a new ``TypeAdapter`` for every request it validates)::

    @bp.post("/v1/queries")
    @validate_request(SubmitQueryBody)      # the view gets data=SubmitQueryBody(...)
    async def submit_query(data: SubmitQueryBody) -> ...

    @bp.get("/v1/queries")
    @validate_querystring(QueryListArgs)    # the view gets query_args=QueryListArgs(...)
    async def list_queries(query_args: QueryListArgs) -> ...

What quart-schema documents (``/openapi.json``) is read from the same attributes
its own decorators set; a body or query string that does not fit is the same
``RequestSchemaValidationError`` (``QuerystringValidationError``), which the error
handlers turn into a 400 (see ``errors``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter
from pydantic import ValidationError as PydanticValidationError
from quart import Request, current_app, request
from quart_schema.validation import (
    QUART_SCHEMA_QUERYSTRING_ATTRIBUTE,
    QUART_SCHEMA_REQUEST_ATTRIBUTE,
    DataSource,
    QuerystringValidationError,
    RequestSchemaValidationError,
)

from leasegate.http.server.context import header

View = TypeVar("View", bound=Callable[..., Awaitable[Any]])
# A view that reads an optional JSON body itself: the model the document shows for it.
OPTIONAL_BODY_ATTRIBUTE = "leasegate_optional_body"
# What quart-schema's model_load turns into its validation error.
INVALID = (TypeError, ValueError, PydanticValidationError)


def _adapter(model: type[BaseModel], func: Callable[..., Any]) -> TypeAdapter[Any]:
    if not inspect.iscoroutinefunction(func):
        raise TypeError(f"{func.__qualname__}: a validated view must be a coroutine function")
    return TypeAdapter(model)


def validate_request(model: type[BaseModel]) -> Callable[[View], View]:
    """The view's JSON body as ``data=model(...)``; 400 when it does not fit."""

    def decorator(func: View) -> View:
        setattr(func, QUART_SCHEMA_REQUEST_ATTRIBUTE, (model, DataSource.JSON))
        adapter = _adapter(model, func)

        @functools.wraps(func)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            body = await json_body(request)
            try:
                data = adapter.validate_python(body)
            except INVALID as error:
                raise RequestSchemaValidationError(error)  # noqa: B904 (as quart-schema)
            return await func(*args, data=data, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


async def json_body(request: Request) -> Any:
    """``await request.get_json()``: for the usual ``Content-Type: application/json``
    without its parse by werkzeug (Quart's ``is_json``, a few microseconds a request);
    anything else, and a body that does not parse, as Quart reads it (same answer,
    same error)."""
    cached = request._cached_json
    if header(request, b"content-type") != "application/json" or cached[False] is not Ellipsis:
        return await request.get_json()
    data = await request.get_data(as_text=True)
    try:
        document = current_app.json.loads(data)  # what Quart's get_json calls
    except ValueError:
        return await request.get_json()
    cached[False] = document
    return document


def optional_body(model: type[BaseModel]) -> Callable[[View], View]:
    """For a view that reads its body itself, where an empty one or ``null`` means
    "nothing said" (``routes.operator.optional_reason``): ``/openapi.json`` shows
    ``model`` or null as its body, not required (with the 400, 408 and 413 a body
    brings)."""

    def decorator(func: View) -> View:
        setattr(func, OPTIONAL_BODY_ATTRIBUTE, model)
        return func

    return decorator


def validate_querystring(model: type[BaseModel]) -> Callable[[View], View]:
    """The view's query string as ``query_args=model(...)`` (a name given more than
    once, or ending in ``[]``, as a list); 400 when it does not fit."""

    def decorator(func: View) -> View:
        setattr(func, QUART_SCHEMA_QUERYSTRING_ATTRIBUTE, model)
        adapter = _adapter(model, func)

        @functools.wraps(func)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            given: dict[str, Any] = {}
            for key in request.args:
                values = request.args.getlist(key)
                if key.endswith("[]"):
                    given[key.removesuffix("[]")] = values
                else:
                    given[key] = values if len(values) > 1 else values[0]
            try:
                query_args = adapter.validate_python(given)
            except INVALID as error:
                raise QuerystringValidationError(error)  # noqa: B904 (as quart-schema)
            return await func(*args, query_args=query_args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator
