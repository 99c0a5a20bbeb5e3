"""The upstream client: submit tasks and queries, read them, wait for them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import httpx

from leasegate.client._async.backend import Stopper, current_time, open_task_group, sleep
from leasegate.client._async.http import AsyncHTTP, AsyncHTTPOwner, read_events
from leasegate.client._batch import chunks, submitted
from leasegate.client._errors import LeasegateError, StateConflict, TransportError
from leasegate.client._events import Cursor, Event
from leasegate.client._http import DEFAULT_TIMEOUT, Retry, path
from leasegate.client._requests import (
    cancel_took_effect,
    given,
    long_poll_seconds,
    many_bodies,
    query_body,
    task_body,
    timed_out,
)
from leasegate.client._types import (
    Account,
    DeviceHeartbeat,
    Entry,
    JSONObject,
    Page,
    Query,
    QuerySubmitted,
    Task,
    TaskSubmitted,
)

log = logging.getLogger("leasegate.client")


class AsyncClientBase(AsyncHTTPOwner):
    """All of :class:`AsyncClient` but its waits (and so of :class:`Client`, generated)."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: Retry | None = None,
    ) -> None:
        self._http = AsyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=retry or Retry()
        )

    # ---- tasks ------------------------------------------------------------------------

    async def submit_task(
        self,
        site: str,
        kind: str,
        params: JSONObject,
        *,
        task_id: str | None = None,
        account: str | None = None,
        priority: int | None = None,
        not_before: datetime | str | None = None,
        device_id: str | None = None,
        batch_total: int | None = None,
        max_cost: int | None = None,
    ) -> TaskSubmitted:
        """Submit an irreversible task; ``created`` is False if this id was submitted before
        with the same payload (a different payload raises :class:`IdempotencyConflict`)."""
        body = task_body(
            site, kind, params, task_id, account, priority, not_before, device_id,
            batch_total, max_cost,
        )  # fmt: skip
        return cast(TaskSubmitted, await self._http.call("POST", path("tasks"), json=body))

    async def submit_many_tasks(
        self, items: Iterable[Mapping[str, Any]]
    ) -> list[TaskSubmitted | LeasegateError]:
        """Submit many tasks, up to 100 a request, each item a dict of
        :meth:`submit_task`'s arguments; per item, in order, what :meth:`submit_task`
        would have returned, or the :class:`LeasegateError` it would have raised
        (e.g. :class:`InsufficientFunds` for that item alone). An id given twice is
        a replay: the second gets ``created`` False."""
        return await self._many(many_bodies(items, "task"), "tasks", "task")

    async def _many(self, bodies: list[JSONObject], channel: str, noun: str) -> list[Any]:
        answers: list[Any] = []
        for chunk in chunks(bodies):
            reply = await self._http.call("POST", path(channel, "batch"), json={"items": chunk})
            answers += submitted(reply, noun, len(chunk))
        return answers

    async def get_task(self, task_id: str, wait_seconds: float | None = None) -> Task:
        """The task object; with ``wait_seconds`` (0–30) the gateway holds the reply until
        the task is settled (finished, or stale or paused: waiting for someone) or the
        wait ends."""
        return cast(Task, await self._get("tasks", task_id, wait_seconds))

    async def _get(self, channel: str, job_id: str, wait_seconds: float | None) -> Any:
        params = None if wait_seconds is None else {"wait_seconds": wait_seconds}
        return await self._http.call("GET", path(channel, job_id), params=params,
                                     extra_timeout=wait_seconds or 0.0)

    async def list_tasks(self, **filters: str | int | None) -> Page[Task]:
        """Tasks, newest first, that match every filter given: ``status``, ``site``,
        ``account``, ``kind``, ``tenant``, ``worker``, ``id_prefix``, ``since`` and
        ``until`` (RFC 3339), ``text`` (in params and errors), ``limit`` (1–500),
        ``offset``; an unknown one raises :class:`InvalidRequest`."""
        return cast(
            Page[Task], await self._http.call("GET", path("tasks"), params=given(**filters))
        )

    async def cancel_task(self, task_id: str) -> Task:
        """Cancel: a queued, leased or paused task is canceled at once; a running one gets
        ``cancel_requested`` (its worker decides how it ends). A finished task raises
        :class:`StateConflict`, unless this call's own earlier try is what canceled it."""
        try:
            return cast(Task, await self._http.call("POST", path("tasks", task_id, "cancel")))
        except StateConflict as error:
            if error.attempts > 1:
                task = await self.get_task(task_id)
                if cancel_took_effect(task):
                    return task
            raise

    async def _wait(self, channel: str, job_id: str, done: frozenset[str],
                    limit: float | None) -> Any:
        """Long-poll ``channel``'s ``job_id`` until its status is one of ``done``; after
        ``limit`` seconds (None: none), raise ``TimeoutError``."""
        deadline = None if limit is None else current_time() + limit
        while True:
            wait = long_poll_seconds(None if deadline is None else deadline - current_time())
            asked = current_time()
            job = await self._get(channel, job_id, wait)
            if job["status"] in done:
                return job
            if deadline is not None and current_time() >= deadline:
                raise timed_out(channel[:-1], job_id, job["status"], limit)
            if current_time() - asked < wait / 2:  # the poll was not held: do not spin
                await sleep(1.0)

    # ---- queries ----------------------------------------------------------------------

    async def submit_query(
        self,
        site: str,
        kind: str,
        params: JSONObject,
        *,
        query_id: str | None = None,
        max_cost: int | None = None,
        max_attempts: int | None = None,
    ) -> QuerySubmitted:
        """Submit a read-only query (delivered at least once; a failed attempt is tried
        again after a backoff, up to ``max_attempts`` attempts: 1–100, default the
        gateway's ``query_max_attempts``)."""
        body = query_body(site, kind, params, query_id, max_cost, max_attempts)
        return cast(QuerySubmitted, await self._http.call("POST", path("queries"), json=body))

    async def submit_many_queries(
        self, items: Iterable[Mapping[str, Any]]
    ) -> list[QuerySubmitted | LeasegateError]:
        """Submit many queries, as :meth:`submit_many_tasks` does tasks."""
        return await self._many(many_bodies(items, "query"), "queries", "query")

    async def get_query(self, query_id: str, wait_seconds: float | None = None) -> Query:
        """The query object; with ``wait_seconds`` (0–30) the gateway holds the reply until
        the query is finished or the wait ends."""
        return cast(Query, await self._get("queries", query_id, wait_seconds))

    async def list_queries(self, **filters: str | int | None) -> Page[Query]:
        """Queries, newest first, that match every filter given: as :meth:`list_tasks`
        (no ``account``)."""
        return cast(
            Page[Query], await self._http.call("GET", path("queries"), params=given(**filters))
        )

    # ---- ledger -----------------------------------------------------------------------

    async def credit(self, account: str, amount: int, ref: str,
                     memo: str | None = None) -> Account:
        """Credit ``amount`` (minor units) to a tenant's account (admin key). Idempotent by
        ``ref``: a retry changes nothing; another amount under the same ``ref`` raises
        :class:`IdempotencyConflict`."""
        body = given(amount=amount, ref=ref, memo=memo)
        return cast(Account, await self._http.call(
            "POST", path("ledger", "accounts", account, "credit"), json=body))

    async def account(self, account: str) -> Account:
        """A ledger account (a client key: its own tenant's only)."""
        return cast(Account, await self._http.call("GET", path("ledger", "accounts", account)))

    async def entries(self, account: str, *, limit: int | None = None,
                      offset: int | None = None) -> Page[Entry]:
        """An account's journal lines, newest first."""
        return cast(Page[Entry], await self._http.call(
            "GET", path("ledger", "accounts", account, "entries"),
            params=given(limit=limit, offset=offset)))

    # ---- devices ----------------------------------------------------------------------

    def events(self, *, job_ids: Iterable[str] | None = None, site: str | None = None,
               device_id: str | None = None, channel: str | None = None,
               last_event_id: int | None = None) -> AsyncGenerator[Event, None]:
        """Live job events (own tenant; admin: all), for ever: :class:`JobEvent`, or
        :class:`EventsReset` when some were missed (re-read). Reconnects by itself,
        resuming after the last event seen (or ``last_event_id``). ``Client``'s is a
        generator (``close()`` it to stop), ``AsyncClient``'s an async generator
        (``async for``; ``aclose()`` it)."""
        return read_events(self._http, Cursor(job_ids, site, device_id, channel,
                                              last_event_id))

    async def heartbeat_device(self, device_id: str) -> DeviceHeartbeat:
        """Tell the gateway an end user's device is still there (its paused tasks resume)."""
        return cast(
            DeviceHeartbeat,
            await self._http.call("POST", path("devices", device_id, "heartbeat")),
        )

    @contextlib.asynccontextmanager
    async def keep_device_alive(self, device_id: str, *,
                                every: float = 30.0) -> AsyncIterator[None]:
        """Heartbeat ``device_id`` every ``every`` seconds in the background (``Client``: a
        thread; ``AsyncClient``: a task, under trio or asyncio) while the ``with`` block
        runs (``async with`` for ``AsyncClient``), e.g. while an upstream page waits for
        its batch::

            with client.keep_device_alive("browser-42", every=30):
                done = client.wait_task(task_id, timeout=3600)

        The first heartbeat is sent before the block starts, so a refusal (6008, a bad
        id) is raised here; later failures are logged and the next beat tries again.
        Keep ``every`` well below the gateway's ``device_pause_after``.
        """
        await self.heartbeat_device(device_id)
        beating = Stopper()
        async with open_task_group() as group:
            group.start_soon(self._beat, device_id, every, beating,
                             name=f"heartbeat {device_id}")
            try:
                yield
            finally:
                beating.stop()

    async def _beat(self, device_id: str, every: float, beating: Stopper) -> None:
        while not await beating.wait(every):
            try:  # one attempt: the next beat is the retry, and leaving never waits
                with beating.interruptible():
                    await self._http.call("POST", path("devices", device_id, "heartbeat"),
                                          attempts=1)
            except (LeasegateError, TransportError) as error:
                log.warning("heartbeat of device %s failed: %s", device_id, error)
