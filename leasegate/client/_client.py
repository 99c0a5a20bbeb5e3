"""The upstream client: submit tasks and queries, read them, wait for them."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Self, TypeVar, cast

import anyio
import httpx

from leasegate.client._batch import chunks, submitted
from leasegate.client._errors import LeasegateError, StateConflict, TransportError
from leasegate.client._events import Event, _Cursor, async_events, sync_events
from leasegate.client._http import DEFAULT_TIMEOUT, AsyncHTTP, Retry, SyncHTTP, new_id, path
from leasegate.client._types import (
    QUERY_DONE_STATES,
    TASK_DONE_STATES,
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

MAX_WAIT_SECONDS: Final = 30
"""The longest long-poll the gateway holds (``wait_seconds`` 0–30)."""

_POLL_FIRST, _POLL_FACTOR, _POLL_MAX = 0.5, 1.5, 5.0  # wait_task's GET polling

_V = TypeVar("_V")


def iso(moment: datetime | str) -> str:
    """An API timestamp (UTC, whole seconds, ``Z``); a naive datetime is taken as UTC."""
    if isinstance(moment, str):
        return moment
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _given(**fields: _V | None) -> dict[str, _V]:
    """The ``fields`` that are not None (of a request body, or a list's filters)."""
    return {name: value for name, value in fields.items() if value is not None}


def _task_body(
    site: str,
    kind: str,
    params: JSONObject,
    task_id: str | None,
    account: str | None,
    priority: int | None,
    not_before: datetime | str | None,
    device_id: str | None,
    batch_total: int | None,
    max_cost: int | None,
) -> JSONObject:
    return _given(
        task_id=task_id or new_id(),
        site=site,
        account=account,
        kind=kind,
        params=params,
        priority=priority,
        not_before=None if not_before is None else iso(not_before),
        device_id=device_id,
        batch_total=batch_total,
        max_cost=max_cost,
    )


def _query_body(
    site: str, kind: str, params: JSONObject, query_id: str | None, max_cost: int | None
) -> JSONObject:
    return _given(
        query_id=query_id or new_id(), site=site, kind=kind, params=params, max_cost=max_cost
    )


_TASK_DEFAULTS: Final[dict[str, Any]] = dict.fromkeys(
    ("task_id", "account", "priority", "not_before", "device_id", "batch_total", "max_cost"))


def _many(items: Iterable[Mapping[str, Any]], noun: str) -> list[JSONObject]:
    """The bodies of a ``submit_many_*`` (each a dict of the single submit's keyword
    arguments, ``params`` optional); a key the single submit does not take is a
    TypeError, before anything is sent."""
    if noun == "task":
        return [_task_body(**{"params": {}, **_TASK_DEFAULTS, **item}) for item in items]
    return [_query_body(**{"params": {}, "query_id": None, "max_cost": None, **item})
            for item in items]


def _long_poll(remaining: float | None) -> int:
    """The ``wait_seconds`` of the next long-poll: up to 30, at least 1."""
    if remaining is None:
        return MAX_WAIT_SECONDS
    return max(1, min(MAX_WAIT_SECONDS, math.ceil(remaining)))


def _timed_out(what: str, item_id: str, status: str, timeout: float | None) -> TimeoutError:
    return TimeoutError(f"{what} {item_id} is still {status} after {timeout}s")


def _cancel_took_effect(task: Task) -> bool:
    return task["status"] == "canceled" or task["cancel_requested"]


class Client:
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

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        retry: Retry | None = None,
    ) -> None:
        self._http = SyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=retry or Retry()
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # ---- tasks ------------------------------------------------------------------------

    def submit_task(
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
        body = _task_body(
            site, kind, params, task_id, account, priority, not_before, device_id,
            batch_total, max_cost,
        )  # fmt: skip
        return cast(TaskSubmitted, self._http.call("POST", path("tasks"), json=body))

    def submit_many_tasks(
        self, items: Iterable[Mapping[str, Any]]
    ) -> list[TaskSubmitted | LeasegateError]:
        """Submit many tasks, up to 100 a request, each item a dict of
        :meth:`submit_task`'s arguments; per item, in order, what :meth:`submit_task`
        would have returned, or the :class:`LeasegateError` it would have raised
        (e.g. :class:`InsufficientFunds` for that item alone). An id given twice is
        a replay: the second gets ``created`` False."""
        return self._many(_many(items, "task"), "tasks", "task")

    def _many(self, bodies: list[JSONObject], channel: str,
              noun: str) -> list[Any]:
        answers: list[Any] = []
        for chunk in chunks(bodies):
            reply = self._http.call("POST", path(channel, "batch"), json={"items": chunk})
            answers += submitted(reply, noun, len(chunk))
        return answers

    def get_task(self, task_id: str) -> Task:
        """The task object."""
        return cast(Task, self._http.call("GET", path("tasks", task_id)))

    def list_tasks(self, **filters: str | int | None) -> Page[Task]:
        """Tasks, newest first; filters: ``status``, ``site``, ``account``, ``kind``,
        ``limit`` (1–500), ``offset``."""
        return cast(Page[Task], self._http.call("GET", path("tasks"), params=_given(**filters)))

    def cancel_task(self, task_id: str) -> Task:
        """Cancel: a queued, leased or paused task is canceled at once; a running one gets
        ``cancel_requested`` (its worker decides how it ends). A finished task raises
        :class:`StateConflict`, unless this call's own earlier try is what canceled it."""
        try:
            return cast(Task, self._http.call("POST", path("tasks", task_id, "cancel")))
        except StateConflict as error:
            if error.attempts > 1:
                task = self.get_task(task_id)
                if _cancel_took_effect(task):
                    return task
            raise

    def wait_task(self, task_id: str, timeout: float | None = None) -> Task:
        """Poll until the task is finished (succeeded, failed, canceled, expired) or needs
        someone (stale, paused), and return it. Raises ``TimeoutError`` after ``timeout``
        seconds (None: wait as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = _POLL_FIRST
        while True:
            task = self.get_task(task_id)
            if task["status"] in TASK_DONE_STATES:
                return task
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise _timed_out("task", task_id, task["status"], timeout)
            time.sleep(interval if remaining is None else min(interval, remaining))
            interval = min(_POLL_MAX, interval * _POLL_FACTOR)

    # ---- queries ----------------------------------------------------------------------

    def submit_query(
        self,
        site: str,
        kind: str,
        params: JSONObject,
        *,
        query_id: str | None = None,
        max_cost: int | None = None,
    ) -> QuerySubmitted:
        """Submit a read-only query (delivered at least once)."""
        body = _query_body(site, kind, params, query_id, max_cost)
        return cast(QuerySubmitted, self._http.call("POST", path("queries"), json=body))

    def submit_many_queries(
        self, items: Iterable[Mapping[str, Any]]
    ) -> list[QuerySubmitted | LeasegateError]:
        """Submit many queries, as :meth:`submit_many_tasks` does tasks."""
        return self._many(_many(items, "query"), "queries", "query")

    def get_query(self, query_id: str, wait_seconds: float | None = None) -> Query:
        """The query object; with ``wait_seconds`` (0–30) the gateway holds the reply until
        the query is finished or the wait ends."""
        params = None if wait_seconds is None else {"wait_seconds": wait_seconds}
        return cast(
            Query,
            self._http.call(
                "GET", path("queries", query_id), params=params,
                extra_timeout=wait_seconds or 0.0,
            ),
        )  # fmt: skip

    def wait_query(self, query_id: str, timeout: float | None = None) -> Query:
        """Long-poll until the query is finished (succeeded, failed, expired) and return it.
        Raises ``TimeoutError`` after ``timeout`` seconds (None: as long as it takes;
        a query expires by itself after the gateway's ``query_ttl``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            wait = _long_poll(remaining)
            asked = time.monotonic()
            query = self.get_query(query_id, wait_seconds=wait)
            if query["status"] in QUERY_DONE_STATES:
                return query
            if deadline is not None and time.monotonic() >= deadline:
                raise _timed_out("query", query_id, query["status"], timeout)
            if time.monotonic() - asked < wait / 2:  # the poll was not held: do not spin
                time.sleep(1.0)

    def list_queries(self, **filters: str | int | None) -> Page[Query]:
        """Queries, newest first; filters: ``status``, ``site``, ``kind``, ``limit``,
        ``offset``."""
        return cast(Page[Query], self._http.call("GET", path("queries"), params=_given(**filters)))

    # ---- ledger -----------------------------------------------------------------------

    def credit(self, account: str, amount: int, ref: str, memo: str | None = None) -> Account:
        """Credit ``amount`` (minor units) to a tenant's account (admin key). Idempotent by
        ``ref``: a retry changes nothing; another amount under the same ``ref`` raises
        :class:`IdempotencyConflict`."""
        body = _given(amount=amount, ref=ref, memo=memo)
        return cast(Account, self._http.call("POST", path("ledger", "accounts", account,
                                                          "credit"), json=body))

    def account(self, account: str) -> Account:
        """A ledger account (a client key: its own tenant's only)."""
        return cast(Account, self._http.call("GET", path("ledger", "accounts", account)))

    def entries(self, account: str, *, limit: int | None = None,
                offset: int | None = None) -> Page[Entry]:
        """An account's journal lines, newest first."""
        return cast(Page[Entry], self._http.call(
            "GET", path("ledger", "accounts", account, "entries"),
            params=_given(limit=limit, offset=offset)))

    # ---- devices ----------------------------------------------------------------------

    def events(self, *, job_ids: Iterable[str] | None = None, site: str | None = None,
               device_id: str | None = None, channel: str | None = None,
               last_event_id: int | None = None) -> Generator[Event, None, None]:
        """Live job events (own tenant; admin: all), for ever: :class:`JobEvent`, or
        :class:`EventsReset` when some were missed (re-read). Reconnects by itself,
        resuming after the last event seen (or ``last_event_id``); ``close()`` it to
        stop."""
        return sync_events(self._http, _Cursor(job_ids, site, device_id, channel,
                                               last_event_id))

    def heartbeat_device(self, device_id: str) -> DeviceHeartbeat:
        """Tell the gateway an end user's device is still there (its paused tasks resume)."""
        return cast(
            DeviceHeartbeat, self._http.call("POST", path("devices", device_id, "heartbeat"))
        )

    @contextlib.contextmanager
    def keep_device_alive(self, device_id: str, *, every: float = 30.0) -> Iterator[None]:
        """Heartbeat ``device_id`` every ``every`` seconds (from a thread) while the
        ``with`` block runs, e.g. while an upstream page waits for its batch::

            with client.keep_device_alive("browser-42", every=30):
                done = client.wait_task(task_id, timeout=3600)

        The first heartbeat is sent before the block starts, so a refusal (6008, a bad
        id) is raised here; later failures are logged and the next beat tries again.
        Keep ``every`` well below the gateway's ``device_pause_after``.
        """
        self.heartbeat_device(device_id)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(every):
                try:  # one attempt: the next beat is the retry, and leaving never waits
                    self._http.call("POST", path("devices", device_id, "heartbeat"), attempts=1)
                except (LeasegateError, TransportError) as error:
                    log.warning("heartbeat of device %s failed: %s", device_id, error)

        thread = threading.Thread(target=beat, name=f"heartbeat {device_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


class AsyncClient:
    """Asynchronous :class:`Client` over ``httpx.AsyncClient``, for trio or asyncio (anyio).

    ::

        async with AsyncClient("http://127.0.0.1:8470", key="lg_...") as client:
            query = await client.submit_query("shop", "balance", {"account": "alice"})
            done = await client.wait_query(query["query_id"], timeout=60)
    """

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: Retry | None = None,
    ) -> None:
        self._http = AsyncHTTP(
            base_url, key, timeout=timeout, transport=transport, retry=retry or Retry()
        )

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
        """See :meth:`Client.submit_task`."""
        body = _task_body(
            site, kind, params, task_id, account, priority, not_before, device_id,
            batch_total, max_cost,
        )  # fmt: skip
        return cast(TaskSubmitted, await self._http.call("POST", path("tasks"), json=body))

    async def submit_many_tasks(
        self, items: Iterable[Mapping[str, Any]]
    ) -> list[TaskSubmitted | LeasegateError]:
        """See :meth:`Client.submit_many_tasks`."""
        return await self._many(_many(items, "task"), "tasks", "task")

    async def _many(self, bodies: list[JSONObject], channel: str, noun: str) -> list[Any]:
        answers: list[Any] = []
        for chunk in chunks(bodies):
            reply = await self._http.call("POST", path(channel, "batch"), json={"items": chunk})
            answers += submitted(reply, noun, len(chunk))
        return answers

    async def get_task(self, task_id: str) -> Task:
        """The task object."""
        return cast(Task, await self._http.call("GET", path("tasks", task_id)))

    async def list_tasks(self, **filters: str | int | None) -> Page[Task]:
        """See :meth:`Client.list_tasks`."""
        return cast(
            Page[Task], await self._http.call("GET", path("tasks"), params=_given(**filters))
        )

    async def cancel_task(self, task_id: str) -> Task:
        """See :meth:`Client.cancel_task`."""
        try:
            return cast(Task, await self._http.call("POST", path("tasks", task_id, "cancel")))
        except StateConflict as error:
            if error.attempts > 1:
                task = await self.get_task(task_id)
                if _cancel_took_effect(task):
                    return task
            raise

    async def wait_task(self, task_id: str) -> Task:
        """Poll until the task is finished or needs someone (as :meth:`Client.wait_task`).
        No ``timeout`` argument: bound it the anyio way, ``with anyio.fail_after(600):``."""
        interval = _POLL_FIRST
        while True:
            task = await self.get_task(task_id)
            if task["status"] in TASK_DONE_STATES:
                return task
            await anyio.sleep(interval)
            interval = min(_POLL_MAX, interval * _POLL_FACTOR)

    # ---- queries ----------------------------------------------------------------------

    async def submit_query(
        self,
        site: str,
        kind: str,
        params: JSONObject,
        *,
        query_id: str | None = None,
        max_cost: int | None = None,
    ) -> QuerySubmitted:
        """See :meth:`Client.submit_query`."""
        body = _query_body(site, kind, params, query_id, max_cost)
        return cast(QuerySubmitted, await self._http.call("POST", path("queries"), json=body))

    async def submit_many_queries(
        self, items: Iterable[Mapping[str, Any]]
    ) -> list[QuerySubmitted | LeasegateError]:
        """See :meth:`Client.submit_many_queries`."""
        return await self._many(_many(items, "query"), "queries", "query")

    async def get_query(self, query_id: str, wait_seconds: float | None = None) -> Query:
        """See :meth:`Client.get_query`."""
        params = None if wait_seconds is None else {"wait_seconds": wait_seconds}
        return cast(
            Query,
            await self._http.call(
                "GET", path("queries", query_id), params=params,
                extra_timeout=wait_seconds or 0.0,
            ),
        )  # fmt: skip

    async def wait_query(self, query_id: str) -> Query:
        """Long-poll until the query is finished (as :meth:`Client.wait_query`). No
        ``timeout`` argument: bound it the anyio way, ``with anyio.fail_after(60):``."""
        while True:
            asked = anyio.current_time()
            query = await self.get_query(query_id, wait_seconds=MAX_WAIT_SECONDS)
            if query["status"] in QUERY_DONE_STATES:
                return query
            if anyio.current_time() - asked < MAX_WAIT_SECONDS / 2:  # the poll was not held
                await anyio.sleep(1.0)

    async def list_queries(self, **filters: str | int | None) -> Page[Query]:
        """See :meth:`Client.list_queries`."""
        return cast(
            Page[Query], await self._http.call("GET", path("queries"), params=_given(**filters))
        )

    # ---- ledger -----------------------------------------------------------------------

    async def credit(self, account: str, amount: int, ref: str,
                     memo: str | None = None) -> Account:
        """See :meth:`Client.credit`."""
        body = _given(amount=amount, ref=ref, memo=memo)
        return cast(Account, await self._http.call(
            "POST", path("ledger", "accounts", account, "credit"), json=body))

    async def account(self, account: str) -> Account:
        """See :meth:`Client.account`."""
        return cast(Account, await self._http.call("GET", path("ledger", "accounts", account)))

    async def entries(self, account: str, *, limit: int | None = None,
                      offset: int | None = None) -> Page[Entry]:
        """See :meth:`Client.entries`."""
        return cast(Page[Entry], await self._http.call(
            "GET", path("ledger", "accounts", account, "entries"),
            params=_given(limit=limit, offset=offset)))

    # ---- devices ----------------------------------------------------------------------

    def events(self, *, job_ids: Iterable[str] | None = None, site: str | None = None,
               device_id: str | None = None, channel: str | None = None,
               last_event_id: int | None = None) -> AsyncGenerator[Event, None]:
        """As :meth:`Client.events`, an async generator (``async for event in ...``;
        ``aclose()`` it to stop)."""
        return async_events(self._http, _Cursor(job_ids, site, device_id, channel,
                                                last_event_id))

    async def heartbeat_device(self, device_id: str) -> DeviceHeartbeat:
        """See :meth:`Client.heartbeat_device`."""
        return cast(
            DeviceHeartbeat,
            await self._http.call("POST", path("devices", device_id, "heartbeat")),
        )

    @contextlib.asynccontextmanager
    async def keep_device_alive(self, device_id: str, *,
                                every: float = 30.0) -> AsyncIterator[None]:
        """See :meth:`Client.keep_device_alive`: heartbeats from a background task (an
        anyio task group, so it runs under trio or asyncio alike)::

            async with client.keep_device_alive("browser-42", every=30):
                done = await client.wait_task(task_id, timeout=3600)
        """
        await self.heartbeat_device(device_id)

        async def beat() -> None:
            while True:
                await anyio.sleep(every)
                try:
                    await self.heartbeat_device(device_id)
                except (LeasegateError, TransportError) as error:
                    log.warning("heartbeat of device %s failed: %s", device_id, error)

        async with anyio.create_task_group() as group:
            group.start_soon(beat)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
