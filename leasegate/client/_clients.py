"""The two clients: one generated body each, and the waits each side spells its own way.

Everything else is ``AsyncClientBase`` (``_async/client.py``) and ``ClientBase``,
generated from it. The waits differ on purpose: a blocking call cannot be
cancelled, so :class:`Client`'s take a ``timeout``, while :class:`AsyncClient`'s
are bounded the anyio (trio) way, by a cancel scope. Both long-poll.
"""

from __future__ import annotations

from typing import cast

from leasegate.client._async.client import AsyncClientBase
from leasegate.client._sync.client import ClientBase
from leasegate.client._types import Query, Task

TASK_DONE_STATES = frozenset({"succeeded", "failed", "canceled", "expired", "stale", "paused"})
"""Where :meth:`Client.wait_task` stops: terminal, or waiting for a human or a resume."""

QUERY_DONE_STATES = frozenset({"succeeded", "failed", "expired"})


class Client(ClientBase):
    """Synchronous client for upstream callers (role ``client``), over ``httpx.Client``.

    ::

        with Client("http://127.0.0.1:8470", key="lg_...") as client:
            task = client.submit_task("shop", "place_order", {"sku": "A1"}, account="alice")
            done = client.wait_task(task["task_id"], timeout=600)

    Every call is retried on transport errors, 5xx and 429 (see :class:`Retry`);
    a submit without an id gets one generated before the first try, so a retry
    after a lost reply replays the same submission. Errors of the gateway raise
    :class:`LeasegateError` (a subclass per code), unreachable gateways
    :class:`TransportError`. ``transport`` is handed to httpx (tests pass an
    ``httpx.MockTransport``).
    """

    def wait_task(self, task_id: str, timeout: float | None = None) -> Task:
        """Long-poll until the task is finished (succeeded, failed, canceled, expired) or
        needs someone (stale, paused), and return it. Raises ``TimeoutError`` after
        ``timeout`` seconds (None: wait as long as it takes)."""
        return cast(Task, self._wait("tasks", task_id, TASK_DONE_STATES, timeout))

    def wait_query(self, query_id: str, timeout: float | None = None) -> Query:
        """Long-poll until the query is finished (succeeded, failed, expired) and return it.
        Raises ``TimeoutError`` after ``timeout`` seconds (None: as long as it takes;
        a query expires by itself after the gateway's ``query_ttl``)."""
        return cast(Query, self._wait("queries", query_id, QUERY_DONE_STATES, timeout))


class AsyncClient(AsyncClientBase):
    """Asynchronous :class:`Client` over ``httpx.AsyncClient``, for trio or asyncio (anyio).

    ::

        async with AsyncClient("http://127.0.0.1:8470", key="lg_...") as client:
            query = await client.submit_query("shop", "balance", {"account": "alice"})
            with anyio.fail_after(60):
                done = await client.wait_query(query["query_id"])
    """

    async def wait_task(self, task_id: str) -> Task:
        """Long-poll until the task is finished or needs someone (as :meth:`Client.wait_task`).
        No ``timeout`` argument: bound it the anyio way, ``with anyio.fail_after(600):``."""
        return cast(Task, await self._wait("tasks", task_id, TASK_DONE_STATES, None))

    async def wait_query(self, query_id: str) -> Query:
        """Long-poll until the query is finished (as :meth:`Client.wait_query`). No
        ``timeout`` argument: bound it the anyio way, ``with anyio.fail_after(60):``."""
        return cast(Query, await self._wait("queries", query_id, QUERY_DONE_STATES, None))
