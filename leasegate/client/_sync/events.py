# Generated from leasegate/client/_async/events.py by scripts/sync_sdk.py: do not edit.
"""Reading ``GET /v1/events``: one endless sequence of events (see ``_events``)."""

from __future__ import annotations

from collections.abc import Generator

import httpx

from leasegate.client._errors import LeasegateError, error_from_response
from leasegate.client._events import READ_TIMEOUT, Cursor, Event, SSEParser
from leasegate.client._http import next_delay, retryable
from leasegate.client._sync.backend import sleep
from leasegate.client._sync.http import SyncHTTP


def read_events(http: SyncHTTP, cursor: Cursor) -> Generator[Event, None]:
    """The events ``cursor`` asks for, from where it stands, for ever (reconnecting)."""
    failures = 0
    timeout = httpx.Timeout(http.timeout, read=READ_TIMEOUT)
    while True:
        try:
            with http.client.stream("GET", http.base_url.join("v1/events"),
                                          params=cursor.params,
                                          headers=cursor.headers(),
                                          timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_from_response(response)
                failures = 0
                parser = SSEParser()
                for line in response.iter_lines():
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
        sleep(delay)
