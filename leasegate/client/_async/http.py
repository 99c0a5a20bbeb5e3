"""The request layer's calls: one JSON call, retried when that is safe (see ``_http``), and
the event stream, read for ever (reconnecting; see ``_events``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, Self, TypedDict, Unpack

import httpx

from leasegate.client._async.backend import Sleep, sleep
from leasegate.client._errors import LeasegateError, error_from_response
from leasegate.client._events import READ_TIMEOUT, Cursor, Event, SSEParser
from leasegate.client._http import (
    JSON_HEADERS,
    Params,
    Retry,
    client_options,
    decode,
    encode_json,
    gateway_failed,
    gateways,
    next_delay,
    retryable,
    server_time,
    tuned,
)


class CallOptions(TypedDict, total=False):
    """The keywords of :meth:`AsyncHTTP.call` (defaults: those of ``call_dated``)."""

    json: Any
    params: Params | None
    extra_timeout: float
    attempts: int | None
    forever: bool
    pause: Sleep


log = logging.getLogger("leasegate.client")


class AsyncHTTP:
    """An httpx client with the gateway's key, answers decoded, retries done. Given
    several gateways (of one database), a try that finds its gateway failing (no
    connection, a timeout, a 502-504) is followed by a try on the next one."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        key: str,
        *,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None,
        retry: Retry,
    ) -> None:
        self.timeout = timeout
        self.retry = retry
        bases = gateways(base_url)
        self.client = httpx.AsyncClient(**client_options(bases, key, timeout, transport))
        self._gateways = tuned(self.client, bases)
        self._at = 0  # the gateway calls go to, until it fails

    @property
    def base_url(self) -> httpx.URL:
        """The gateway calls go to now."""
        return self._gateways[self._at].base

    def fail_over(self, error: Exception) -> None:
        """After ``error``, send the next try to the next gateway if the one tried failed
        (and there is another)."""
        if len(self._gateways) > 1 and gateway_failed(error):
            failed = self.base_url
            self._at = (self._at + 1) % len(self._gateways)
            log.warning("gateway %s failed (%r); calls go to %s now", failed, error,
                        self.base_url)

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
        pause: Sleep = sleep,
    ) -> tuple[Any, float | None]:
        """:meth:`call`, and the gateway's clock when it answered (see ``server_time``).
        ``pause`` sleeps between tries (a worker's ends early when it is stopped)."""
        retry = self.retry if attempts is None else replace(self.retry, attempts=attempts)
        # Encoded once: every retry sends the same bytes.
        content = None if json is None else encode_json(json)
        headers = None if json is None else JSON_HEADERS
        failures = 0
        while True:
            try:
                response = await self.client.request(
                    method, self._gateways[self._at](url), content=content, headers=headers,
                    params=params, timeout=self.timeout + extra_timeout,
                )
                return decode(response), server_time(response)
            except (httpx.TransportError, LeasegateError) as error:
                failures += 1
                # Before next_delay, which raises on a last try: the next call (a retry,
                # or the caller's next one after attempts=1) goes to the next gateway.
                self.fail_over(error)
                delay = next_delay(error, failures, retry, forever=forever, what=f"{method} {url}")
            await pause(delay)

    async def aclose(self) -> None:
        await self.client.aclose()


class AsyncHTTPOwner:
    """What holds a connection pool (``_http``): ``async with`` it, or :meth:`aclose` it."""

    _http: AsyncHTTP

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


async def read_events(http: AsyncHTTP, cursor: Cursor) -> AsyncGenerator[Event, None]:
    """The events ``cursor`` asks for, from where it stands, for ever (reconnecting)."""
    failures = 0
    timeout = httpx.Timeout(http.timeout, read=READ_TIMEOUT)
    while True:
        try:
            async with http.client.stream("GET", http.base_url.join("v1/events"),
                                          params=cursor.params,
                                          headers=cursor.headers(),
                                          timeout=timeout) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_from_response(response)
                failures = 0
                parser = SSEParser()
                async for line in response.aiter_lines():
                    message = parser.feed(line)
                    event = cursor.parse(message) if message else None
                    if event is not None:
                        yield event
            continue  # the stream ended (max_wait_seconds): resume at once
        except (httpx.TransportError, LeasegateError) as error:
            if isinstance(error, LeasegateError) and not retryable(error):
                raise
            failures += 1
            http.fail_over(error)
            delay = next_delay(error, failures, http.retry, forever=True, what="GET /v1/events")
        await sleep(delay)
