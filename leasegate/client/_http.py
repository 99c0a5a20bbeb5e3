"""The private request layer: one JSON call, retried when that is safe.

Every call the SDK makes is safe to repeat (submits carry their id, leases a
``request_id``, start/renew/result the lease token), so a transport error, a
5xx or a 429 is retried with the same request, after an exponential, capped,
jittered pause. Anything else is an answer and is raised as it is.
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, Final, TypedDict, Unpack
from urllib.parse import quote

import anyio
import httpx

from leasegate.client._errors import (
    LeasegateError,
    RateLimited,
    TransportError,
    error_from_response,
)

log = logging.getLogger("leasegate.client")

USER_AGENT: Final = "leasegate-python/0.1"
DEFAULT_TIMEOUT: Final = 10.0
Params = Mapping[str, str | int | float]


@dataclass(frozen=True, slots=True)
class Retry:
    """How a request that may not have arrived is retried.

    ``attempts`` is the number of tries in all (1: no retry). The pause after
    the n-th failure is ``backoff * 2**(n-1)`` capped at ``max_backoff``, of
    which a random 50-100 % is taken, and at least a 429's ``Retry-After``.

    ``attempts`` bounds every :class:`Client` and :class:`AsyncClient` call, a
    worker's ``run_once`` lease call and its start of a task. The rest use the
    same pauses but not ``attempts``: ``run()`` leases for ever, a result is
    sent until the gateway answers it, the "not executed" report of an
    unconfirmed start is offered ``UNCONFIRMED_START_REPORTS`` times, and a
    renewal is sent once, its own loop renewing again after the pause (or
    the 429's ``Retry-After``) until the handler returns or the lease is lost.
    """

    attempts: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0

    def delay(self, failures: int, retry_after: float | None = None) -> float:
        """The pause before the next try, after ``failures`` failed tries."""
        step = min(self.max_backoff, self.backoff * 2.0 ** min(failures - 1, 30))
        pause = step * (0.5 + random.random() / 2)
        return max(pause, retry_after) if retry_after is not None else pause


class CallOptions(TypedDict, total=False):
    """The keywords of :meth:`AsyncHTTP.call` (defaults: those of ``call_dated``)."""

    json: Any
    params: Params | None
    extra_timeout: float
    attempts: int | None
    forever: bool


class SyncCallOptions(CallOptions, total=False):
    """The keywords of :meth:`SyncHTTP.call`: :class:`CallOptions` and the retry pause."""

    sleep: Callable[[float], None]


def new_id() -> str:
    """A client-side id: 96 random bits, so a retry can replay the same submit."""
    return secrets.token_hex(12)


def path(*parts: str) -> str:
    """``path("tasks", task_id, "start")``: ``/v1/tasks/{task_id}/start``, each part
    percent-encoded (the id characters ``:`` and ``@`` are kept as they are)."""
    return "/v1/" + "/".join(quote(part, safe=":@") for part in parts)


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "User-Agent": USER_AGENT}


def _decode(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise error_from_response(response)
    try:
        return response.json()
    except ValueError:
        raise LeasegateError(
            response.status_code, 0, "invalid_response", "the reply is not JSON"
        ) from None


def server_time(response: httpx.Response) -> float | None:
    """The gateway's clock when it answered (the ``Date`` header, seconds since the
    epoch), or None if the reply has no readable ``Date``."""
    value = response.headers.get("Date")
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:  # "-0000": UTC, by RFC 5322
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def retryable(error: LeasegateError) -> bool:
    """An error answer that is retried (a 5xx or a 429): the request may yet be taken."""
    return error.status >= 500 or isinstance(error, RateLimited)


def next_delay(error: Exception, failures: int, retry: Retry, *, forever: bool, what: str) -> float:
    """The pause before retrying after ``error``; raises the final error instead
    when it is an answer (not retryable) or the tries are used up."""
    retry_after = None
    if isinstance(error, LeasegateError):
        error.attempts = failures
        if not retryable(error):
            raise error
        retry_after = error.retry_after
    if not forever and failures >= retry.attempts:
        if isinstance(error, httpx.TransportError):
            raise TransportError(f"{what}: {error!r}", failures) from error
        raise error
    delay = retry.delay(failures, retry_after)
    log.warning("%s failed (%r), try %d; retrying in %.1fs", what, error, failures, delay)
    return delay


class SyncHTTP:
    """An ``httpx.Client`` with the gateway's key, answers decoded, retries done."""

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float,
        transport: httpx.BaseTransport | None,
        retry: Retry,
    ) -> None:
        self.timeout = timeout
        self.retry = retry
        self.client = httpx.Client(
            base_url=base_url, headers=_headers(key), timeout=timeout, transport=transport
        )

    def call(self, method: str, url: str, **options: Unpack[SyncCallOptions]) -> Any:
        """Send one request (again, with the same body, while that is safe)."""
        return self.call_dated(method, url, **options)[0]

    def call_dated(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Params | None = None,
        extra_timeout: float = 0.0,
        attempts: int | None = None,
        forever: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> tuple[Any, float | None]:
        """:meth:`call`, and the gateway's clock when it answered (see :func:`server_time`)."""
        retry = self.retry if attempts is None else replace(self.retry, attempts=attempts)
        failures = 0
        while True:
            try:
                response = self.client.request(
                    method, url, json=json, params=params, timeout=self.timeout + extra_timeout
                )
                return _decode(response), server_time(response)
            except (httpx.TransportError, LeasegateError) as error:
                failures += 1
                delay = next_delay(error, failures, retry, forever=forever, what=f"{method} {url}")
            sleep(delay)

    def close(self) -> None:
        self.client.close()


class AsyncHTTP:
    """An ``httpx.AsyncClient`` with the gateway's key, answers decoded, retries done."""

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None,
        retry: Retry,
    ) -> None:
        self.timeout = timeout
        self.retry = retry
        self.client = httpx.AsyncClient(
            base_url=base_url, headers=_headers(key), timeout=timeout, transport=transport
        )

    async def call(self, method: str, url: str, **options: Unpack[CallOptions]) -> Any:
        """Send one request (again, with the same body, while that is safe)."""
        reply, _ = await self.call_dated(method, url, **options)
        return reply

    async def call_dated(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Params | None = None,
        extra_timeout: float = 0.0,
        attempts: int | None = None,
        forever: bool = False,
    ) -> tuple[Any, float | None]:
        """:meth:`call`, and the gateway's clock when it answered (see :func:`server_time`)."""
        retry = self.retry if attempts is None else replace(self.retry, attempts=attempts)
        failures = 0
        while True:
            try:
                response = await self.client.request(
                    method, url, json=json, params=params, timeout=self.timeout + extra_timeout
                )
                return _decode(response), server_time(response)
            except (httpx.TransportError, LeasegateError) as error:
                failures += 1
                delay = next_delay(error, failures, retry, forever=forever, what=f"{method} {url}")
            await anyio.sleep(delay)

    async def aclose(self) -> None:
        await self.client.aclose()
