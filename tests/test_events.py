"""Job history and the live event stream against the served gateway (real time).

The gateway here ends each stream after ``max_wait_seconds`` (0.5 s), so a read
of ``GET /v1/events`` is simply the whole body of one short stream, and keeps
5 events for resuming, so "too old" is quick to reach.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import trio

from leasegate.client import AsyncClient, Client, EventsReset, JobEvent
from tests import served

pytestmark = pytest.mark.both_engines  # the behavioural suite: SQLite and PostgreSQL

RING = 5
MAX_WAIT = 0.5  # seconds a stream lasts

Message = tuple[str, int | None, dict[str, Any]]  # (event type, id, data)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[served.Served]:
    gateway = served.start(tmp_path_factory.mktemp("events"), {
        "LEASEGATE_MAX_WAIT_SECONDS": str(MAX_WAIT), "LEASEGATE_EVENT_RING_SIZE": str(RING),
        "LEASEGATE_RATE_LIMIT_PER_SECOND": "0"})
    try:
        with gateway.client("admin") as admin:
            other = admin.post("/v1/admin/keys", json={"role": "client", "name": "other",
                                                       "tenant": "other"})
            gateway.keys["other"] = other.json()["key"]
        yield gateway
    finally:
        served.stop(gateway)


def client_of(gateway: served.Served, who: str) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, timeout=10,
                        headers={"Authorization": f"Bearer {gateway.keys[who]}"})


Params = list[tuple[str, str | int | float | bool | None]]


def read_stream(gateway: served.Served, who: str, params: Params | None = None,
                last: int | None = None,
                connected: threading.Event | None = None) -> list[Message]:
    """One whole stream (it ends after max_wait_seconds): its messages in order.
    ``connected`` is set once the stream has begun (its first line, where to resume,
    is written when the gateway starts following events for it)."""
    headers = {} if last is None else {"Last-Event-ID": str(last)}
    with client_of(gateway, who) as http, http.stream(
            "GET", "/v1/events", params=params or [], headers=headers) as reply:
        assert reply.status_code == 200, reply.read()
        assert reply.headers["content-type"].startswith("text/event-stream")
        chunks = []
        for chunk in reply.iter_text():
            chunks.append(chunk)
            if connected is not None:
                connected.set()
        text = "".join(chunks)
    messages: list[Message] = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if ": " in line and not line.startswith(":"))
        if "event" in fields:
            event_id = int(fields["id"]) if "id" in fields else None
            messages.append((fields["event"], event_id, json.loads(fields["data"])))
    return messages


def history(gateway: served.Served, channel: str, job_id: str,
            who: str = "client") -> list[dict[str, Any]]:
    with client_of(gateway, who) as http:
        reply = http.get(f"/v1/{channel}/{job_id}/events")
    assert reply.status_code == 200, reply.text
    items: list[dict[str, Any]] = reply.json()["items"]
    return items


def submit(gateway: served.Served, job_id: str, who: str = "client", **extra: Any) -> int:
    """Submit a query (or a task: ``channel="tasks"``); the id of its submitted event."""
    channel = extra.pop("channel", "queries")
    key = "task_id" if channel == "tasks" else "query_id"
    with client_of(gateway, who) as http:
        reply = http.post(f"/v1/{channel}", json={key: job_id, "site": "shop", "kind": "k",
                                                   **extra})
        assert reply.status_code == 201, reply.text
        return int(http.get(f"/v1/{channel}/{job_id}/events").json()["items"][0]["event_id"])


def test_the_history_of_a_task_from_submit_to_settle(gateway: served.Served) -> None:
    with client_of(gateway, "admin") as admin:
        assert admin.post("/v1/ledger/accounts/default/credit",
                          json={"amount": 100, "ref": "events-1"}).status_code == 200
    submit(gateway, "t-hist", channel="tasks", max_cost=10)
    with client_of(gateway, "worker") as worker:
        lease = worker.post("/v1/tasks/lease", json={"worker_id": "w1"}).json()["items"][0]
        fenced = {"worker_id": "w1", "lease_token": lease["lease_token"]}
        assert worker.post("/v1/tasks/t-hist/start", json=fenced).status_code == 200
        for progress in ({"done": 1}, {"done": 1}, {"done": 2}):  # the repeat is no event
            assert worker.post("/v1/tasks/t-hist/renew",
                               json={**fenced, "progress": progress}).status_code == 200
        assert worker.post("/v1/tasks/t-hist/result",
                           json={**fenced, "outcome": "succeeded", "cost": 3}).status_code == 200
    deadline = time.monotonic() + 5
    while (items := history(gateway, "tasks", "t-hist"))[-1]["kind"] != "settled":
        assert time.monotonic() < deadline, items  # told after the ledger's commit
        time.sleep(0.05)
    assert [(i["kind"], i["status"]) for i in items] == [
        ("submitted", "queued"), ("leased", "leased"), ("started", "running"),
        ("renewed", "running"), ("renewed", "running"), ("result", "succeeded"),
        ("settled", "succeeded")]
    waited = items[1]["detail"]["waited"]  # submit to lease: the dispatch latency
    assert isinstance(waited, float) and 0 <= waited < 5
    assert items[1]["detail"] == {"worker_id": "w1", "attempt": 1, "waited": waited}
    assert items[3]["detail"] == {"progress": {"done": 1}}
    assert items[5]["detail"] == {"outcome": "succeeded", "late": False, "worker_id": "w1",
                                  "cost": 3}
    assert items[6]["detail"] == {"outcome": "succeeded", "charged": 3, "refunded": 7}
    ids = [i["event_id"] for i in items]
    assert ids == sorted(ids) and all(i["at"].endswith("Z") for i in items)
    # Another tenant does not see it (404, as for the task itself); an admin does.
    with client_of(gateway, "other") as other:
        assert other.get("/v1/tasks/t-hist/events").status_code == 404
    assert history(gateway, "tasks", "t-hist", "admin") == items


def test_the_history_of_a_query_and_of_a_cancel(gateway: served.Served) -> None:
    submit(gateway, "q-hist")
    with client_of(gateway, "worker") as worker:
        lease = worker.post("/v1/queries/lease", json={"worker_id": "w2"}).json()["items"][0]
        assert lease["query_id"] == "q-hist"
        assert worker.post("/v1/queries/q-hist/result", json={
            "worker_id": "w2", "lease_token": lease["lease_token"], "outcome": "failed",
            "error": {"message": "site down", "retryable": False}}).status_code == 200
    items = history(gateway, "queries", "q-hist")
    assert 0 <= items[1]["detail"].pop("waited") < 5
    assert [(i["kind"], i["status"], i["detail"]) for i in items] == [
        ("submitted", "queued", {}), ("leased", "leased", {"worker_id": "w2", "attempt": 1}),
        ("result", "failed", {"outcome": "failed", "late": False, "worker_id": "w2"})]
    submit(gateway, "t-cancel", channel="tasks", not_before="2099-01-01T00:00:00Z")
    with client_of(gateway, "client") as http:
        assert http.post("/v1/tasks/t-cancel/cancel").status_code == 200
        assert http.get("/v1/queries/nothing-here/events").status_code == 404
    assert [i["kind"] for i in history(gateway, "tasks", "t-cancel")] == [
        "submitted", "canceled"]


def test_a_reconnect_with_last_event_id_gets_exactly_the_missed_events(
        gateway: served.Served) -> None:
    wanted: Params = [("job_id", j) for j in ("q-r1", "q-r2", "q-r3")]
    got: list[list[Message]] = []
    connected = threading.Event()
    reading = threading.Thread(target=lambda: got.append(read_stream(
        gateway, "client", wanted, connected=connected)))
    reading.start()
    assert connected.wait(10)  # a stream without Last-Event-ID starts from now
    submit(gateway, "q-r1")
    reading.join()  # the stream ended (max_wait_seconds): disconnected
    [(kind, seen, data)] = got[0]
    assert (kind, data["job_id"], data["kind"], data["event_id"]) == ("job", "q-r1",
                                                                        "submitted", seen)
    assert data["tenant"] == "default" and data["channel"] == "query"
    assert data["job_kind"] == "k"  # the job's own kind, beside the event's
    assert seen is not None
    second, third = submit(gateway, "q-r2"), submit(gateway, "q-r3")  # while away
    resumed = read_stream(gateway, "client", wanted, last=seen)
    assert [(m[0], m[1], m[2]["job_id"]) for m in resumed] == [
        ("job", second, "q-r2"), ("job", third, "q-r3")]


def test_a_stream_without_events_still_says_where_to_resume(gateway: served.Served) -> None:
    quiet: Params = [("job_id", "q-quiet")]
    with client_of(gateway, "client") as http:
        text = http.get("/v1/events", params=quiet).text
    first_line = text.splitlines()[0]  # before any event: what an EventSource keeps
    assert first_line.startswith("id: ")
    submit(gateway, "q-quiet")  # between two streams
    [(kind, _, data)] = read_stream(gateway, "client", quiet,
                                    last=int(first_line.removeprefix("id: ")))
    assert (kind, data["job_id"]) == ("job", "q-quiet")


def test_a_last_event_id_no_longer_kept_gets_a_reset(gateway: served.Served) -> None:
    first = submit(gateway, "q-old-0")
    for n in range(1, RING + 2):
        last = submit(gateway, f"q-old-{n}")
    messages = read_stream(gateway, "client", last=first)
    assert messages[0][0] == "reset" and messages[0][1] == last  # goes on from now
    assert "re-read" in messages[0][2]["reason"]
    assert len(messages) == 1
    # An id this gateway never handed out: the same.
    assert read_stream(gateway, "client", last=10**12)[0][0] == "reset"
    with client_of(gateway, "client") as http:
        for given in (b"soon", "\u00b2".encode("latin-1"), b"9" * 40):  # "²" is a digit
            bad = http.get("/v1/events", headers={b"Last-Event-ID": given})
            assert bad.status_code == 400 and bad.json()["error"]["code"] == 4000


def test_a_client_sees_its_own_tenant_only(gateway: served.Served) -> None:
    marker = submit(gateway, "q-iso-marker")
    submit(gateway, "q-iso-mine")
    submit(gateway, "q-iso-theirs", who="other")

    def jobs(who: str, params: Params | None = None) -> set[str]:
        return {m[2]["job_id"] for m in read_stream(gateway, who, params, last=marker)}

    reads: list[tuple[str, Params | None, set[str]]] = [
        ("client", None, {"q-iso-mine"}),
        ("other", None, {"q-iso-theirs"}),
        ("other", [("job_id", "q-iso-mine")], set()),  # naming it changes nothing
        ("admin", None, {"q-iso-mine", "q-iso-theirs"}),
        ("admin", [("channel", "task")], set()),
        ("admin", [("site", "elsewhere")], set())]
    with ThreadPoolExecutor(len(reads)) as pool:  # each read lasts a whole stream
        found = list(pool.map(lambda read: jobs(read[0], read[1]), reads))
    assert found == [expected for _, _, expected in reads]
    with client_of(gateway, "worker") as worker:
        assert worker.get("/v1/events").status_code == 403


def test_the_sdk_iterates_across_reconnects(gateway: served.Served) -> None:
    marker = submit(gateway, "q-sdk-marker")
    submit(gateway, "q-sdk-1")
    with Client(gateway.url, gateway.keys["client"]) as client:
        events = client.events(job_ids=["q-sdk-1", "q-sdk-2"], last_event_id=marker)
        first = next(events)
        assert isinstance(first, JobEvent) and first.job_id == "q-sdk-1"
        time.sleep(MAX_WAIT + 0.2)  # the stream this came on has ended by now
        submit(gateway, "q-sdk-2")
        second = next(events)  # after a reconnect with Last-Event-ID
        assert isinstance(second, JobEvent)
        assert (second.job_id, second.kind, second.status) == ("q-sdk-2", "submitted",
                                                               "queued")
        assert second.event_id > first.event_id
        events.close()
        reset = next(client.events(last_event_id=10**12))
        assert isinstance(reset, EventsReset) and "re-read" in reset.reason

    async def read_async() -> JobEvent | EventsReset:
        async with AsyncClient(gateway.url, gateway.keys["client"]) as client:
            async for event in client.events(job_ids=["q-sdk-2"], last_event_id=marker):
                return event
        raise AssertionError("no event")

    found = trio.run(read_async)
    assert isinstance(found, JobEvent) and found.job_id == "q-sdk-2"
