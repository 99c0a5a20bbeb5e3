"""The SDK worker and query retries, against the real gateway in this process: an
exception is retried after its backoff, a permanent one (``PermanentError`` or a type
the worker names) fails the query at once, ``Snooze`` queues it again without spending
an attempt; each attempt's error is on the query."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from leasegate.actors.queries import results as query_results
from leasegate.client import (
    AsyncClient,
    AsyncJob,
    AsyncWorker,
    HandlerResult,
    PermanentError,
    Snooze,
)
from tests.conftest import Gateway
from tests.test_batch_sdk import AppTransport
from tests.test_query_retries import Fixed


class AccountClosed(Exception):
    """A handler's own error that trying again cannot mend."""


@pytest.fixture(autouse=True)
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query_results, "JITTER", Fixed(1.0))


async def test_the_worker_retries_snoozes_and_fails_permanently(
        gateway: Gateway, nursery: trio.Nursery, autojump_clock: Any) -> None:
    transport = AppTransport(gateway, nursery)
    seen: list[tuple[str, float]] = []

    async def handler(job: AsyncJob) -> HandlerResult:
        seen.append((job.params["case"], trio.current_time() - began))
        case, n = job.params["case"], len([s for s in seen if s[0] == job.params["case"]])
        if case == "flaky" and n == 1:
            raise ConnectionError("site slow")
        if case == "later" and n == 1:
            raise Snooze(45)
        if case == "gone":
            raise PermanentError("no such account")
        if case == "closed":
            raise AccountClosed("account closed")
        return {"ok": case}

    async with AsyncClient("http://gateway", gateway.keys["t1"], transport=transport) as up, \
            AsyncWorker("http://gateway", gateway.keys["worker"], "desk-q", channel="queries",
                        transport=transport, wait_seconds=0,
                        permanent=(AccountClosed,)) as desk:
        began = trio.current_time()
        for case in ("flaky", "later", "gone", "closed"):
            await up.submit_query("shop", "balance", {"case": case}, query_id=case,
                                  max_attempts=2)
        assert await desk.run_once(handler) == 1  # one at a time: flaky, later, gone, closed
        for _ in range(3):
            assert await desk.run_once(handler) == 1
        await trio.sleep(2)  # flaky's backoff: 2 s after its failure
        assert await desk.run_once(handler) == 1
        await trio.sleep(43)  # later's snooze: 45 s after it
        assert await desk.run_once(handler) == 1
        flaky, later, gone, closed = [await up.get_query(q)
                                      for q in ("flaky", "later", "gone", "closed")]
    assert (flaky["status"], flaky["attempts"], flaky["result"]) == ("succeeded", 2,
                                                                      {"ok": "flaky"})
    assert [(e["attempt"], e["type"], e["message"]) for e in flaky["errors"]] == [
        (1, "ConnectionError", "site slow")]
    assert (later["status"], later["attempts"], later["errors"]) == ("succeeded", 1, [])
    assert (gone["status"], gone["attempts"], gone["errors"][0]["type"]) == (
        "failed", 1, "leasegate.client._job.PermanentError")
    assert (closed["status"], closed["attempts"]) == ("failed", 1)
    assert (closed["errors"][0]["type"] or "").endswith("AccountClosed")
    assert [(case, at) for case, at in seen] == [
        ("flaky", 0), ("later", 0), ("gone", 0), ("closed", 0), ("flaky", 2), ("later", 45)]
