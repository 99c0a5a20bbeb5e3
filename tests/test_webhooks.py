"""Completion webhooks over HTTP, on both engines: endpoints, signed deliveries (checked
with the ``standardwebhooks`` reference library), retries at exact virtual times, an
endpoint disabled after a day of failures, redelivery, rotation, the bounds.

The receiver is an ``httpx.MockTransport`` (what the gateway sends, when, and what it
answers); time is virtual (autojump), the retries have no jitter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from standardwebhooks.webhooks import Webhook

from leasegate.client import WebhookVerificationError, verify_webhook
from leasegate.clock import Clock, iso
from leasegate.settings import Settings
from tests.conftest import EPOCH, Gateway, start_gateway
from tests.test_http_tasks import assert_error, call, finish, get, lease_one, start, submit

pytestmark = pytest.mark.both_engines

Json = dict[str, Any]
URL = "http://receiver.test/hooks"
FAILING = ("task.failed", "task.canceled", "task.stale", "task.expired")


def respond(status: int, body: str = "", **headers: str) -> httpx.Response:
    """An answer as a network transport gives one: its body a stream, read as it comes."""
    return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body.encode()))


@dataclass
class Received:
    at: float  # wall seconds (the gateway's clock)
    url: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Json:
        return dict(json.loads(self.body))


class Receiver:
    """Where the gateway's webhooks go: each request kept; answered by ``answer``
    (an httpx.Response, or an exception to raise: a refused connection)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.received: list[Received] = []
        self.answer: Callable[[httpx.Request], httpx.Response] = (
            lambda request: respond(204))

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.received.append(Received(self.clock.now(), str(request.url),
                                      dict(request.headers), request.content))
        return self.answer(request)


@pytest.fixture
def receiver(clock: Clock) -> Receiver:
    return Receiver(clock)


@pytest.fixture
async def hooks(nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
                receiver: Receiver) -> Gateway:
    settings = settings.replace(webhook_allow_private=True, webhook_retry_jitter=0.0)
    return await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock,
                               webhook_transport=httpx.MockTransport(receiver.handle))


async def create(gw: Gateway, who: str = "t1", **fields: Any) -> Json:
    status, body = await call(gw, "POST", "/v1/webhooks", who,
                              {"url": URL, "events": ["task.succeeded"], **fields})
    assert status == 201, body
    return body


async def deliveries(gw: Gateway, endpoint_id: str, who: str = "t1") -> list[Json]:
    status, body = await call(gw, "GET", f"/v1/webhooks/{endpoint_id}/deliveries", who)
    assert status == 200, body
    return list(body["items"])


async def succeed(gw: Gateway, task_id: str, **result: Any) -> Json:
    await submit(gw, task_id=task_id)
    item = await lease_one(gw)
    await start(gw, item)
    return await finish(gw, item, result=result or None)


async def settle() -> None:
    """Let the gateway's tasks (the deliverer's round) run to where they wait."""
    await trio.testing.wait_all_tasks_blocked(0.01)


def signed_by(secret: str, received: Received) -> bool:
    """Whether the reference library's signature of the delivery with ``secret`` is
    one of those it carries."""
    stamp = datetime.fromtimestamp(int(received.headers["webhook-timestamp"]), UTC)
    expected = Webhook(secret).sign(received.headers["webhook-id"], stamp,
                                    received.body.decode())
    return expected in received.headers["webhook-signature"].split()


# ---- endpoints ----------------------------------------------------------------------

async def test_an_endpoint_is_created_with_its_secret_shown_once(hooks: Gateway) -> None:
    created = await create(hooks, description="orders")
    assert created["secret"].startswith("whsec_")
    assert len(Webhook(created["secret"])._whsecret) >= 24
    endpoint_id = created["endpoint_id"]
    assert {k: created[k] for k in ("url", "events", "description", "disabled")} == {
        "url": URL, "events": ["task.succeeded"], "description": "orders", "disabled": False}
    status, shown = await call(hooks, "GET", f"/v1/webhooks/{endpoint_id}", "t1")
    assert status == 200 and "secret" not in shown
    assert shown == {k: v for k, v in created.items() if k != "secret"}
    status, listed = await call(hooks, "GET", "/v1/webhooks", "t1")
    assert [e["endpoint_id"] for e in listed["items"]] == [endpoint_id]
    assert listed["total"] == 1


async def test_another_tenants_endpoint_is_404_and_an_admin_names_the_tenant(
        hooks: Gateway) -> None:
    endpoint_id = (await create(hooks))["endpoint_id"]
    for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/rotate-secret"),
                         ("GET", "/deliveries"), ("POST", "/deliveries/msg_x/retry")):
        status, body = await call(hooks, method, f"/v1/webhooks/{endpoint_id}{path}", "t2",
                                  {} if method == "PATCH" else None)
        assert_error(status, body, 404, 4040)
    status, listed = await call(hooks, "GET", "/v1/webhooks", "t2")
    assert listed["items"] == []
    status, body = await call(hooks, "POST", "/v1/webhooks", "admin",
                              {"url": URL, "events": ["task.failed"]})
    assert_error(status, body, 403, 4030)
    by_admin = await create(hooks, "admin", tenant="t2")
    assert by_admin["tenant"] == "t2"
    status, listed = await call(hooks, "GET", "/v1/webhooks?tenant=t2", "admin")
    assert [e["endpoint_id"] for e in listed["items"]] == [by_admin["endpoint_id"]]
    status, body = await call(hooks, "POST", "/v1/webhooks", "t1",
                              {"url": URL, "events": ["task.failed"], "tenant": "t2"})
    assert_error(status, body, 403, 4030)
    status, body = await call(hooks, "GET", "/v1/webhooks", "worker")
    assert_error(status, body, 403, 4030)


async def test_bad_endpoints_are_400_and_change_nothing(hooks: Gateway) -> None:
    for bad in ({"url": URL, "events": []}, {"url": URL, "events": ["task.started"]},
                {"url": "ftp://x.test/", "events": ["task.failed"]},
                {"url": "http://user:pw@x.test/", "events": ["task.failed"]},
                {"url": "not a url", "events": ["task.failed"]},
                {"url": "https://[::1/x", "events": ["task.failed"]},
                {"url": "https://x.test:99999/", "events": ["task.failed"]},
                {"url": URL, "events": ["task.failed"], "extra": 1},
                {"url": URL + "/" + "x" * 2048, "events": ["task.failed"]}):
        status, body = await call(hooks, "POST", "/v1/webhooks", "t1", bad)
        assert_error(status, body, 400, 4000)
    status, listed = await call(hooks, "GET", "/v1/webhooks", "t1")
    assert listed["total"] == 0


async def test_patch_changes_what_it_names_and_delete_is_204(hooks: Gateway) -> None:
    endpoint_id = (await create(hooks))["endpoint_id"]
    status, body = await call(hooks, "PATCH", f"/v1/webhooks/{endpoint_id}", "t1",
                              {"events": ["task.failed", "query.failed"], "disabled": True})
    assert status == 200, body
    assert (body["events"], body["disabled"], body["url"]) == (
        ["task.failed", "query.failed"], True, URL)
    status, _ = await hooks.call("DELETE", f"/v1/webhooks/{endpoint_id}", "t1")
    assert status == 204
    status, body = await call(hooks, "GET", f"/v1/webhooks/{endpoint_id}", "t1")
    assert_error(status, body, 404, 4040)


async def test_endpoints_per_tenant_are_bounded(nursery: trio.Nursery, tmp_path: Path,
                                                settings: Settings, clock: Clock) -> None:
    gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings.replace(
        webhook_allow_private=True, webhook_max_endpoints=2), clock)
    await create(gw)
    await create(gw)
    status, body = await call(gw, "POST", "/v1/webhooks", "t1",
                              {"url": URL, "events": ["task.failed"]})
    assert_error(status, body, 409, 6003)
    await create(gw, "t2")  # another tenant's bound is its own


async def test_only_https_to_public_addresses_without_the_private_setting(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> None:
    gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)
    for url in ("http://93.184.215.14/hooks", "https://127.0.0.1/hooks", "https://[::1",
                "https://10.1.2.3/hooks", "https://169.254.169.254/latest",
                "https://[::1]/hooks", "https://192.168.0.1:8443/", "https://localhost/x"):
        status, body = await call(gw, "POST", "/v1/webhooks", "t1",
                                  {"url": url, "events": ["task.failed"]})
        assert_error(status, body, 400, 4000)
    created = await create(gw, url="https://93.184.215.14/hooks")
    status, body = await call(gw, "PATCH", f"/v1/webhooks/{created['endpoint_id']}", "t1",
                              {"url": "https://127.0.0.1/"})
    assert_error(status, body, 400, 4000)


# ---- deliveries -----------------------------------------------------------------------

async def test_a_succeeded_task_is_delivered_signed_with_the_task_object(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    endpoint = await create(hooks)
    await create(hooks, "t2")  # another tenant's endpoint hears nothing of t1's jobs
    await succeed(hooks, "order-1", order_no="A-1")
    await settle()
    [got] = receiver.received
    assert got.url == URL and got.at == EPOCH
    assert got.headers["content-type"] == "application/json"
    assert got.headers["webhook-timestamp"] == str(int(EPOCH))
    assert signed_by(endpoint["secret"], got)
    assert got.json == {"type": "task.succeeded", "timestamp": iso(EPOCH),
                        "data": await get(hooks, "order-1", "t1")}
    assert got.json["data"]["result"] == {"order_no": "A-1"}
    # The SDK's check agrees (at the delivery's own time: the clock is virtual).
    event = verify_webhook(endpoint["secret"], got.headers, got.body, now=got.at)
    assert event["data"]["task_id"] == "order-1"
    [delivery] = await deliveries(hooks, endpoint["endpoint_id"])
    assert delivery == {
        "delivery_id": got.headers["webhook-id"], "endpoint_id": endpoint["endpoint_id"],
        "event_type": "task.succeeded", "job_id": "order-1", "status": "delivered",
        "attempts": 1, "last_status_code": 204, "last_error": None, "last_response": "",
        "next_attempt_at": None, "created_at": iso(EPOCH),
        "updated_at": iso(EPOCH)}


async def test_only_subscribed_terminal_events_are_delivered(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    await create(hooks, events=["task.failed", "task.canceled", "query.succeeded"])
    await succeed(hooks, "ok-1")  # not subscribed
    await submit(hooks, task_id="cancel-1")
    status, _ = await call(hooks, "POST", "/v1/tasks/cancel-1/cancel", "t1")
    assert status == 200
    await submit(hooks, task_id="fail-1")
    item = await lease_one(hooks)
    await start(hooks, item)
    await finish(hooks, item, "failed", error={"message": "sold out"})
    status, _ = await call(hooks, "POST", "/v1/queries", "t1",
                           {"query_id": "q-1", "site": "shop", "kind": "balance", "params": {}})
    assert status == 201
    status, leased = await call(hooks, "POST", "/v1/queries/lease", "worker",
                                {"worker_id": "w1", "wait_seconds": 0})
    token = leased["items"][0]["lease_token"]
    status, _ = await call(hooks, "POST", "/v1/queries/q-1/result", "worker",
                           {"worker_id": "w1", "lease_token": token, "outcome": "succeeded",
                            "result": {"balance": 3}})
    assert status == 200
    await settle()
    assert [(r.json["type"], r.json["data"].get("task_id") or r.json["data"]["query_id"])
            for r in receiver.received] == [
        ("task.canceled", "cancel-1"), ("task.failed", "fail-1"), ("query.succeeded", "q-1")]
    assert receiver.received[1].json["data"]["error"]["message"] == "sold out"
    assert receiver.received[2].json["data"]["result"] == {"balance": 3}


async def test_a_failing_endpoint_is_retried_on_the_schedule_then_failed(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    receiver.answer = lambda request: respond(500, "down " * 400)
    endpoint = await create(hooks)
    await succeed(hooks, "order-1")
    await trio.sleep(2 * 86400)
    offsets = [r.at - EPOCH for r in receiver.received]
    # Svix's schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h after each failure.
    assert offsets == [0, 5, 305, 2105, 9305, 27305, 63305, 99305]
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1
    assert len({r.body for r in receiver.received}) == 1  # the same body every time
    [delivery] = await deliveries(hooks, endpoint["endpoint_id"])
    assert (delivery["status"], delivery["attempts"], delivery["last_status_code"],
            delivery["next_attempt_at"]) == ("failed", 8, 500, None)
    assert len(delivery["last_response"]) == 1024  # what is kept of an answer
    # Failing for over a day: the endpoint is disabled, and says why.
    _, shown = await call(hooks, "GET", f"/v1/webhooks/{endpoint['endpoint_id']}", "t1")
    assert shown["disabled"] is True
    assert "every delivery failed for 24 hours" in shown["disabled_reason"]
    assert "HTTP 500" in shown["disabled_reason"]


async def test_a_pending_delivery_shows_its_next_attempt_and_a_recovery_delivers_it(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    receiver.answer = refused
    endpoint = await create(hooks)
    await succeed(hooks, "order-1")
    await trio.sleep(10)  # attempts at 0 and 5 s failed; the next is due at 305 s
    [delivery] = await deliveries(hooks, endpoint["endpoint_id"])
    assert (delivery["status"], delivery["attempts"], delivery["last_status_code"]) == (
        "pending", 2, None)
    assert "connection refused" in delivery["last_error"]
    assert delivery["next_attempt_at"] == iso(EPOCH + 305)
    receiver.answer = lambda request: respond(200)
    await trio.sleep(300)
    assert [r.at - EPOCH for r in receiver.received] == [0, 5, 305]
    [delivery] = await deliveries(hooks, endpoint["endpoint_id"])
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 3)
    _, shown = await call(hooks, "GET", f"/v1/webhooks/{endpoint['endpoint_id']}", "t1")
    assert shown["disabled"] is False


async def test_redirects_are_not_followed(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    receiver.answer = lambda request: respond(302, location="http://169.254.169.254/")
    endpoint = await create(hooks)
    await succeed(hooks, "order-1")
    await settle()
    assert [r.url for r in receiver.received] == [URL]
    [delivery] = await deliveries(hooks, endpoint["endpoint_id"])
    assert (delivery["status"], delivery["last_status_code"]) == ("pending", 302)


async def test_an_answer_later_than_ten_seconds_is_a_failed_attempt(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    times: list[float] = []

    async def slow(request: httpx.Request) -> httpx.Response:
        times.append(clock.now() - EPOCH)
        await trio.sleep(11 if len(times) == 1 else 9)
        return respond(200)

    gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings.replace(
        webhook_allow_private=True, webhook_retry_jitter=0.0), clock,
        webhook_transport=httpx.MockTransport(slow))
    endpoint = await create(gw)
    await succeed(gw, "order-1")
    await trio.sleep(10.5)
    [delivery] = await deliveries(gw, endpoint["endpoint_id"])
    assert (delivery["status"], delivery["last_error"]) == ("pending", "no answer within 10 s")
    await trio.sleep(60)
    assert times == [0, 15]  # cut at 10 s, tried again 5 s later; 9 s is in time
    [delivery] = await deliveries(gw, endpoint["endpoint_id"])
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 2)


async def test_a_delivery_is_redelivered_on_request(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    endpoint = await create(hooks)
    await succeed(hooks, "order-1")
    await settle()
    [delivery] = await deliveries(hooks, endpoint["endpoint_id"])
    path = f"/v1/webhooks/{endpoint['endpoint_id']}/deliveries/{delivery['delivery_id']}/retry"
    await trio.sleep(60)
    status, body = await call(hooks, "POST", path, "t1")
    assert status == 200, body
    assert body["status"] == "pending"
    await settle()
    assert [r.at - EPOCH for r in receiver.received] == [0, 60]
    assert receiver.received[0].body == receiver.received[1].body
    assert receiver.received[1].headers["webhook-id"] == delivery["delivery_id"]
    [delivery] = await deliveries(hooks, endpoint["endpoint_id"])
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 2)
    status, body = await call(hooks, "POST", path.replace("msg_", "msg_x"), "t1")
    assert_error(status, body, 404, 4040)


async def test_a_rotated_secret_signs_beside_the_new_one_for_a_day(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    endpoint = await create(hooks)
    status, rotated = await call(
        hooks, "POST", f"/v1/webhooks/{endpoint['endpoint_id']}/rotate-secret", "t1")
    assert status == 200, rotated
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != endpoint["secret"]
    assert rotated["previous_secret_expires_at"] == iso(EPOCH + 86400)
    await succeed(hooks, "order-1")
    await settle()
    [first] = receiver.received
    assert len(first.headers["webhook-signature"].split()) == 2
    assert signed_by(endpoint["secret"], first) and signed_by(rotated["secret"], first)
    await trio.sleep(86400)
    await succeed(hooks, "order-2")
    await settle()
    second = receiver.received[1]
    assert len(second.headers["webhook-signature"].split()) == 1
    assert signed_by(rotated["secret"], second) and not signed_by(endpoint["secret"], second)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(endpoint["secret"], second.headers, second.body, now=second.at)


async def test_a_disabled_endpoint_hears_nothing_until_enabled(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    endpoint = await create(hooks)
    path = f"/v1/webhooks/{endpoint['endpoint_id']}"
    await call(hooks, "PATCH", path, "t1", {"disabled": True})
    await succeed(hooks, "order-1")
    await settle()
    assert receiver.received == []
    assert await deliveries(hooks, endpoint["endpoint_id"]) == []
    await call(hooks, "PATCH", path, "t1", {"disabled": False})
    await succeed(hooks, "order-2")
    await settle()
    assert [r.json["data"]["task_id"] for r in receiver.received] == ["order-2"]


async def test_the_oldest_pending_deliveries_past_the_bound_are_dropped_and_counted(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    receiver.answer = lambda request: respond(503)
    gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings.replace(
        webhook_allow_private=True, webhook_retry_jitter=0.0, webhook_max_pending=2),
        clock, webhook_transport=httpx.MockTransport(receiver.handle))
    endpoint = await create(gw)
    for n in range(4):
        await succeed(gw, f"order-{n}")
    await trio.sleep(gw.system.settings.housekeeping_interval + 1)
    listed = await deliveries(gw, endpoint["endpoint_id"])
    assert sorted((d["job_id"], d["status"]) for d in listed) == [
        ("order-0", "failed"), ("order-1", "failed"), ("order-2", "pending"),
        ("order-3", "pending")]
    dropped = [d for d in listed if d["status"] == "failed"]
    assert all("webhook_max_pending" in d["last_error"] for d in dropped)
    response = await gw.client.get("/metrics", headers=gw.auth("admin"))
    text = (await response.get_data()).decode()
    assert "leasegate_webhook_deliveries_dropped_total 2.0" in text


async def test_the_deliverer_is_shown_in_health_and_metrics(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    await create(hooks)
    await succeed(hooks, "order-1")
    await settle()
    status, body = await call(hooks, "GET", "/health", "admin")
    assert status == 200, body
    text = json.dumps(body)
    assert "deliver" in text
    response = await hooks.client.get("/metrics", headers=hooks.auth("admin"))
    metrics = (await response.get_data()).decode()
    assert 'owner="webhooks"' in metrics and 'periodic="deliver"' in metrics


async def test_the_sdk_refuses_a_bad_signature_or_an_old_timestamp(hooks: Gateway) -> None:
    secret = (await create(hooks))["secret"]
    body = b'{"type":"task.succeeded","timestamp":"2026-11-30T08:00:00Z","data":{}}'
    stamp = datetime.fromtimestamp(EPOCH, UTC)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(EPOCH)),
               "webhook-signature": Webhook(secret).sign("msg_1", stamp, body.decode())}
    assert verify_webhook(secret, headers, body, now=EPOCH + 299)["type"] == "task.succeeded"
    for now in (EPOCH + 301, EPOCH - 301):
        with pytest.raises(WebhookVerificationError, match="300 s"):
            verify_webhook(secret, headers, body, now=now)
    with pytest.raises(WebhookVerificationError, match="no signature"):
        verify_webhook(secret, headers, body.replace(b"{}", b"[]"), now=EPOCH)
    with pytest.raises(WebhookVerificationError, match="missing header"):
        verify_webhook(secret, {"webhook-id": "msg_1"}, body, now=EPOCH)


# ---- more events, more gateways ------------------------------------------------------

async def test_stale_expired_and_query_events_are_delivered(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    gw = await start_gateway(nursery, tmp_path / "leasegate.db", settings.replace(
        webhook_allow_private=True, task_ttl=100.0, task_hard_timeout=50.0, query_ttl=100.0,
        query_lease_ttl=10.0, query_max_attempts=1),
        clock, webhook_transport=httpx.MockTransport(receiver.handle))
    await create(gw, events=["task.stale", "task.expired", "query.expired", "query.failed"])
    await submit(gw, task_id="runs-too-long")
    await start(gw, await lease_one(gw))
    await submit(gw, task_id="never-leased", site="nobody-serves")
    for query_id, site in (("lease-lapses", "shop"), ("never-served", "nobody-serves")):
        status, body = await call(gw, "POST", "/v1/queries", "t1", {
            "query_id": query_id, "site": site, "kind": "balance", "params": {}})
        assert status == 201, body
    status, leased = await call(gw, "POST", "/v1/queries/lease", "worker",
                                {"worker_id": "w1", "wait_seconds": 0, "sites": ["shop"]})
    assert [q["query_id"] for q in leased["items"]] == ["lease-lapses"]
    await trio.sleep(200)
    got = sorted((r.json["type"], r.json["data"].get("task_id") or r.json["data"]["query_id"],
                  r.json["data"]["status"]) for r in receiver.received)
    assert got == [("query.expired", "never-served", "expired"),
                   ("query.failed", "lease-lapses", "failed"),
                   ("task.expired", "never-leased", "expired"),
                   ("task.stale", "runs-too-long", "stale")]


async def test_two_gateways_send_each_attempt_once(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        autojump_clock: trio.testing.MockClock) -> None:
    settings = settings.replace(webhook_allow_private=True, webhook_retry_jitter=0.0,
                                deadline_poll_interval=1.0)
    receivers = {name: Receiver(clock) for name in ("gw-a", "gw-b")}
    seen: set[str] = set()

    def first_refused(request: httpx.Request) -> httpx.Response:
        delivery_id = request.headers["webhook-id"]
        if delivery_id in seen:
            return respond(204)
        seen.add(delivery_id)
        return respond(503)

    gateways = []
    for name, found in receivers.items():
        found.answer = first_refused
        gateways.append(await start_gateway(
            nursery, tmp_path / "leasegate.db", settings.replace(gateway=name), clock,
            webhook_transport=httpx.MockTransport(found.handle)))
    a, b = gateways
    endpoint = await create(a)
    for n in range(10):
        await succeed(a if n % 2 else b, f"order-{n}")
    await trio.sleep(60)
    sent = [r.headers["webhook-id"] for found in receivers.values() for r in found.received]
    assert len(sent) == 20 and len(set(sent)) == 10  # each refused once, then delivered
    listed = await deliveries(b, endpoint["endpoint_id"])
    assert {(d["status"], d["attempts"]) for d in listed} == {("delivered", 2)}
    assert len(listed) == 10


async def test_the_console_lists_endpoints_and_deliveries_and_redelivers(
        hooks: Gateway, receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    from tests.test_console_operator import post, signed_in

    endpoint = await create(hooks, description="orders")
    await succeed(hooks, "order-1")
    await settle()
    [delivery] = await deliveries(hooks, endpoint["endpoint_id"])
    csrf = await signed_in(hooks)
    listing = await (await hooks.client.get("/console/webhooks")).get_data(as_text=True)
    assert endpoint["endpoint_id"] in listing and URL in listing
    shown = await (await hooks.client.get(f"/console/webhooks/{endpoint['endpoint_id']}")
                   ).get_data(as_text=True)
    assert delivery["delivery_id"] in shown and "order-1" in shown and "delivered" in shown
    assert endpoint["secret"] not in listing + shown
    status, _ = await post(hooks, f"/console/webhooks/{endpoint['endpoint_id']}/deliveries/"
                                  f"{delivery['delivery_id']}/retry", {"csrf": csrf})
    assert status == 303
    await settle()
    assert [r.headers["webhook-id"] for r in receiver.received] == [delivery["delivery_id"]] * 2
    status, _ = await post(hooks, f"/console/webhooks/{endpoint['endpoint_id']}/deliveries/"
                                  f"{delivery['delivery_id']}/retry", {"csrf": "forged"})
    assert status == 403
