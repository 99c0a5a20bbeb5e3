"""Auth, roles, limits and the error table: every failure is the envelope, never a 500."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from leasegate.clock import Clock
from leasegate.settings import Settings
from tests.conftest import Gateway, start_gateway

QUERY = {"site": "shop", "kind": "balance", "params": {}}

Limited = Callable[..., Awaitable[Gateway]]


@pytest.fixture
def limited(nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock) -> Limited:
    """Starts a gateway of its own with these settings changed (its rate limits)."""
    async def start(**changed: float) -> Gateway:
        return await start_gateway(nursery, tmp_path / "rl.db", settings.replace(**changed),
                                   clock)
    return start


def assert_error(status: int, body: dict[str, Any], want_status: int, want_code: int) -> None:
    assert status == want_status, body
    assert body["error"]["code"] == want_code, body
    assert set(body["error"]) == {"code", "type", "message"}


@pytest.mark.parametrize("header", [None, "Bearer", "Basic abc", "Bearer nonsense",
                                    "Bearer lg_deadbeef_nosuchsecret"])
async def test_missing_or_unknown_key_is_401(gateway: Gateway, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    status, body = await gateway.call("GET", "/v1/queries", headers=headers)
    assert_error(status, body, 401, 4010)


async def test_right_key_id_wrong_secret_is_401(gateway: Gateway) -> None:
    key_id = gateway.keys["t1"].split("_")[1]
    status, body = await gateway.call("GET", "/v1/queries",
                                      headers={"Authorization": f"Bearer lg_{key_id}_guess"})
    assert_error(status, body, 401, 4010)


@pytest.mark.parametrize(("who", "method", "path", "body"), [
    ("worker", "POST", "/v1/queries", QUERY),
    ("admin", "POST", "/v1/queries", QUERY),
    ("t1", "POST", "/v1/queries/lease", {"worker_id": "w"}),
    ("t1", "POST", "/v1/admin/keys", {"role": "admin", "name": "x"}),
    ("worker", "GET", "/v1/queries", None),
    ("t1", "GET", "/v1/workers", None),
])
async def test_wrong_role_is_403(gateway: Gateway, who: str, method: str, path: str,
                                 body: dict[str, Any] | None) -> None:
    status, reply = await gateway.call(method, path, who, json=body)
    assert_error(status, reply, 403, 4030)


async def test_revocation_takes_effect_on_next_request(gateway: Gateway) -> None:
    status, created = await gateway.call("POST", "/v1/admin/keys", "admin",
                                         json={"role": "client", "name": "temp", "tenant": "t9"})
    assert status == 201 and created["key"].startswith("lg_")
    gateway.keys["temp"] = created["key"]
    assert (await gateway.call("GET", "/v1/queries", "temp"))[0] == 200
    _, listed = await gateway.call("GET", "/v1/admin/keys", "admin")
    assert all("key" not in k and "secret_hash" not in k for k in listed["items"])
    status, revoked = await gateway.call("DELETE", f"/v1/admin/keys/{created['key_id']}", "admin")
    assert status == 200 and revoked["revoked_at"] is not None
    status, body = await gateway.call("GET", "/v1/queries", "temp")
    assert_error(status, body, 401, 4010)


@pytest.mark.parametrize("body", [
    {**QUERY, "site": "has space"},
    {**QUERY, "site": "x" * 65},
    {**QUERY, "kind": ""},
    {**QUERY, "query_id": "a/b"},
    {**QUERY, "params": [1, 2]},
    {**QUERY, "max_cost": -1},
    {**QUERY, "unexpected": 1},
    {"kind": "balance"},
])
async def test_bad_submit_is_400_and_changes_nothing(gateway: Gateway,
                                                     body: dict[str, Any]) -> None:
    status, reply = await gateway.call("POST", "/v1/queries", "t1", json=body)
    assert_error(status, reply, 400, 4000)
    _, listed = await gateway.call("GET", "/v1/queries", "admin")
    assert listed["total"] == 0


async def test_malformed_json_is_400(gateway: Gateway) -> None:
    for data in ("{not json", "[1, 2]", ""):
        status, reply = await gateway.call("POST", "/v1/queries", "t1", data=data,
                                           headers={"Content-Type": "application/json"})
        assert_error(status, reply, 400, 4000)


async def test_size_limits_are_413(gateway: Gateway) -> None:
    huge = {"site": "shop", "kind": "k", "params": {"x": "a" * (1024 * 1024)}}
    status, reply = await gateway.call("POST", "/v1/queries", "t1", data=json.dumps(huge),
                                       headers={"Content-Type": "application/json"})
    assert_error(status, reply, 413, 4130)
    big_params = {"site": "shop", "kind": "k", "params": {"x": "a" * (65 * 1024)}}
    status, reply = await gateway.call("POST", "/v1/queries", "t1", json=big_params)
    assert_error(status, reply, 413, 4130)


async def test_framework_errors_use_the_envelope(gateway: Gateway) -> None:
    """A path no route has, or a method its route does not take: the envelope, saying
    which request it was and where the routes are (not Werkzeug's stock text)."""
    status, reply = await gateway.call("GET", "/v1/nowhere", "t1")
    assert_error(status, reply, 404, 4040)
    assert reply["error"]["message"] == ("GET /v1/nowhere: no such route; the API's routes "
                                         "are listed at /docs")
    response = await gateway.client.put("/v1/queries", json={}, headers=gateway.auth("t1"))
    assert_error(response.status_code, reply := await response.get_json(), 405, 4050)
    assert response.headers["Allow"] == "GET, HEAD, POST"
    assert reply["error"]["message"] == ("PUT /v1/queries: this route takes GET, HEAD, POST "
                                         "only; see /docs")
    # A route's name where an id may stand: the fixed route's methods.
    response = await gateway.client.get("/v1/tasks/lease", headers=gateway.auth("t1"))
    assert_error(response.status_code, reply := await response.get_json(), 405, 4050)
    assert response.headers["Allow"] == "POST"
    assert reply["error"]["message"] == "GET /v1/tasks/lease: this route takes POST only; see /docs"
    # No key needed to be told (a misrouted call is not a key's business).
    response = await gateway.client.delete("/health")
    assert (response.status_code, response.headers["Allow"]) == (405, "GET, HEAD")
    long = "/v1/" + "x" * 5000
    status, reply = await gateway.call("GET", long, "t1")
    assert_error(status, reply, 404, 4040)
    assert len(reply["error"]["message"]) < 300  # the caller's path, cut short


@pytest.mark.parametrize("path", ["/v1/queries?limit=501", "/v1/queries?limit=0",
                                  "/v1/queries?offset=-1", "/v1/queries?status=bogus",
                                  "/v1/queries/q1?wait_seconds=31"])
async def test_bad_query_string_is_400(gateway: Gateway, path: str) -> None:
    status, reply = await gateway.call("GET", path, "t1")
    assert_error(status, reply, 400, 4000)


async def test_lease_body_limits(gateway: Gateway) -> None:
    for body in ({"worker_id": "w", "wait_seconds": 31}, {"worker_id": "w", "max": 101},
                 {"worker_id": "w", "max": 0}, {"worker_id": "w w"}):
        status, reply = await gateway.call("POST", "/v1/queries/lease", "worker", json=body)
        assert_error(status, reply, 400, 4000)


async def test_rate_limit_is_429_with_retry_after(
        limited: Limited, autojump_clock: trio.testing.MockClock) -> None:
    gw = await limited(rate_limit_per_second=1, rate_limit_burst=2)
    codes = [(await gw.call("GET", "/v1/queries", "t1"))[0] for _ in range(3)]
    assert codes == [200, 200, 429]
    response = await gw.client.get("/v1/queries", headers=gw.auth("t1"))
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    await trio.sleep(1)
    assert (await gw.call("GET", "/v1/queries", "t1"))[0] == 200
    # Another key has its own bucket.
    assert (await gw.call("GET", "/v1/queries", "t2"))[0] == 200


async def test_storage_failure_is_503_then_recovers(gateway: Gateway) -> None:
    assert (await gateway.call("POST", "/v1/queries", "t1", json=QUERY))[0] == 201
    queries_db = gateway.system.query_actor.db
    pages = queries_db.run_sync(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    queries_db.run_sync(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))
    filler = {**QUERY, "params": {"x": "y" * 60000}}
    status, reply = await gateway.call("POST", "/v1/queries", "t1", json=filler)
    assert_error(status, reply, 503, 5030)
    _, listed = await gateway.call("GET", "/v1/queries", "t1")
    assert listed["total"] == 1  # nothing was changed
    queries_db.run_sync(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))
    assert (await gateway.call("POST", "/v1/queries", "t1", json=filler))[0] == 201


async def test_openapi_describes_the_api(gateway: Gateway) -> None:
    response = await gateway.client.get("/openapi.json")
    assert response.status_code == 200
    spec = await response.get_json()
    for path in ("/v1/queries", "/v1/queries/lease", "/v1/queries/{query_id}/result",
                 "/v1/tasks", "/v1/tasks/lease", "/v1/tasks/{task_id}/start",
                 "/v1/tasks/{task_id}/reclaim", "/v1/admin/keys", "/health"):
        assert path in spec["paths"], path


async def test_health_is_public(gateway: Gateway) -> None:
    status, body = await gateway.call("GET", "/health")
    assert status == 200 and body["status"] == "ok"
    assert body["checks"]["storage_writable"] is True


async def test_metrics_need_admin(gateway: Gateway) -> None:
    status, body = await gateway.call("GET", "/metrics", "t1")
    assert_error(status, body, 403, 4030)
    response = await gateway.client.get("/metrics", headers=gateway.auth("admin"))
    text = (await response.get_data()).decode()
    assert response.status_code == 200 and "leasegate_periodic_runs_total" in text


HUGE = 10**20


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/tasks", {"site": "s", "kind": "k", "params": {}, "max_cost": HUGE}),
    ("POST", "/v1/tasks", {"site": "s", "kind": "k", "params": {}, "batch_total": HUGE}),
    ("POST", "/v1/queries", {"site": "s", "kind": "k", "params": {}, "max_cost": HUGE}),
    ("GET", f"/v1/tasks?offset={HUGE}", None),
    ("GET", f"/v1/queries?offset={HUGE}", None),
])
async def test_integers_past_64_bits_are_400_not_a_crash(
        gateway: Gateway, method: str, path: str, body: dict[str, Any] | None) -> None:
    status, reply = await gateway.call(method, path, "t1", json=body)
    assert_error(status, reply, 400, 4000)
    assert (await gateway.call("GET", "/v1/queries", "t1"))[0] == 200  # still serving


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("raw", [
    '{"site": "s", "kind": "k", "params": {"x": NaN}}',
    '{"site": "s", "kind": "k", "params": {"x": Infinity}}',
    '{"site": "s", "kind": "k", "params": {"x": "\\ud800"}}',
    json.dumps({"site": "s", "kind": "k", "params": {"x": nested(40)}}),
    '{"site": "s", "kind": "k", "params": {"x": ' + "[" * 990 + "1" + "]" * 990 + "}}",
])
async def test_json_that_could_not_be_handed_out_again_is_400(gateway: Gateway, raw: str) -> None:
    status, reply = await gateway.call("POST", "/v1/queries", "t1", data=raw,
                                       headers={"Content-Type": "application/json"})
    assert_error(status, reply, 400, 4000)


async def test_moderate_nesting_is_fine(gateway: Gateway) -> None:
    body = {"site": "s", "kind": "k", "params": {"x": nested(30)}}
    assert (await gateway.call("POST", "/v1/queries", "t1", json=body))[0] == 201


async def test_body_that_is_not_utf8_is_400(gateway: Gateway) -> None:
    status, reply = await gateway.call("POST", "/v1/queries", "t1", data=b'{"site": "\xff"}',
                                       headers={"Content-Type": "application/json"})
    assert_error(status, reply, 400, 4000)


@pytest.mark.parametrize("path", ["/v1/tasks/" + "x" * 65, "/v1/queries/" + "x" * 65,
                                  "/v1/tasks/a%20b/cancel"])
async def test_ids_in_paths_are_checked(gateway: Gateway, path: str) -> None:
    method = "POST" if path.endswith("cancel") else "GET"
    status, reply = await gateway.call(method, path, "t1")
    assert_error(status, reply, 400, 4000)


# --- Transport edges: the work a body costs, callers without a key, misrouted paths ---

def at(address: str) -> dict[str, Any]:
    """Request options that make the call come from ``address``."""
    return {"scope_base": {"client": (address, 40000)}}


async def test_a_body_of_too_many_json_values_is_413_before_validation(gateway: Gateway) -> None:
    many = {**QUERY, **{f"k{i}": 0 for i in range(25_000)}}
    status, reply = await gateway.call("POST", "/v1/queries", "t1", data=json.dumps(many),
                                       headers={"Content-Type": "application/json"})
    assert_error(status, reply, 413, 4130)
    assert "20000" in reply["error"]["message"]
    deep_list = {**QUERY, "params": {"x": [0] * 25_000}}
    status, reply = await gateway.call("POST", "/v1/queries", "t1", json=deep_list)
    assert_error(status, reply, 413, 4130)
    wide = {**QUERY, **{f"k{i}": 0 for i in range(5_000)}}
    status, reply = await gateway.call("POST", "/v1/queries", "t1", json=wide)
    assert_error(status, reply, 400, 4000)
    assert "fields" in reply["error"]["message"]
    # Commas and colons inside strings are not values: such a body is fine.
    punctuated = {**QUERY, "params": {"x": ",:[{" * 10_000}}
    assert (await gateway.call("POST", "/v1/queries", "t1", json=punctuated))[0] == 201
    # The role is checked first: a wrong key costs no parsing at all.
    status, reply = await gateway.call("POST", "/v1/queries", "worker", data=json.dumps(many),
                                       headers={"Content-Type": "application/json"})
    assert_error(status, reply, 403, 4030)


async def test_callers_without_a_known_key_are_limited_by_address(
        limited: Limited, autojump_clock: trio.testing.MockClock) -> None:
    gw = await limited(address_rate_limit_per_second=1, address_rate_limit_burst=3)
    here, v6 = at("192.0.2.7"), at("2001:db8:1:2::1")
    assert (await gw.call("GET", "/v1/queries", "t1", **here))[0] == 200  # first use: a lookup
    codes = [(await gw.call("GET", "/v1/queries", **here))[0] for _ in range(3)]
    assert codes == [401, 401, 429]
    response = await gw.client.get("/health", **here)  # public routes pay too
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    # A key already verified costs its address nothing.
    assert (await gw.call("GET", "/v1/queries", "t1", **here))[0] == 200
    assert (await gw.call("GET", "/v1/queries", **at("192.0.2.8")))[0] == 401
    # IPv6 counts by /64: another host of the same /64 shares the bucket.
    codes = [(await gw.call("GET", "/v1/queries", **v6))[0] for _ in range(3)]
    assert codes == [401, 401, 401]
    assert (await gw.call("GET", "/v1/queries", **at("2001:db8:1:2::99")))[0] == 429
    assert (await gw.call("GET", "/v1/queries", **at("2001:db8:1:3::1")))[0] == 401
    await trio.sleep(1)
    assert (await gw.call("GET", "/v1/queries", **here))[0] == 401


async def test_unknown_key_ids_are_remembered_briefly(
        gateway: Gateway, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from leasegate.actors.keys.records import LookupKey

    lookups: list[str] = []
    mailbox = gateway.system.keys
    real_ask = mailbox.ask

    async def counting_ask(message: Any) -> Any:
        if isinstance(message, LookupKey):
            lookups.append(message.key_id)
        return await real_ask(message)

    monkeypatch.setattr(mailbox, "ask", counting_ask)
    made_up = {"Authorization": "Bearer lg_0badc0ffee00_secret"}
    for _ in range(5):
        status, body = await gateway.call("GET", "/v1/queries", headers=made_up)
        assert_error(status, body, 401, 4010)
    assert lookups == ["0badc0ffee00"]
    await trio.sleep(5)
    assert (await gateway.call("GET", "/v1/queries", headers=made_up))[0] == 401
    assert lookups == ["0badc0ffee00"] * 2
    # A real key is not affected, and is looked up once.
    for _ in range(3):
        assert (await gateway.call("GET", "/v1/queries", "t2"))[0] == 200
    assert len(lookups) == 3


def test_address_and_unknown_key_tables_are_bounded() -> None:
    from leasegate.http.server.auth import RecentlyUnknown
    from leasegate.http.server.limits import RateLimiter

    limiter = RateLimiter(rate=1, burst=1, max_buckets=3)
    for address in ("a", "b", "c"):
        assert limiter.take(address, 0.0) == 0.0
    assert limiter.take("a", 0.0) > 0  # "a" is now the most recently used
    assert limiter.take("d", 0.0) == 0.0  # forgets "b", the least recently used
    assert limiter.take("a", 0.0) > 0 and limiter.take("c", 0.0) > 0
    assert limiter.take("b", 0.0) == 0.0  # a fresh bucket
    unknown = RecentlyUnknown(seconds=5, capacity=2)
    for key_id in ("k1", "k2", "k3"):
        unknown.add(key_id, 0.0)
    assert "k1" not in unknown and unknown.holds("k3", 1.0) and not unknown.holds("k3", 5.0)


@pytest.mark.parametrize("method", ["OPTIONS", "GET", "PUT", "DELETE"])
@pytest.mark.parametrize("path", ["/v1/tasks/lease", "/v1/queries/lease"])
async def test_only_post_reaches_the_lease_paths(gateway: Gateway, method: str, path: str) -> None:
    response = await gateway.client.open(path, method=method, headers=gateway.auth("worker"))
    assert_error(response.status_code, await response.get_json(), 405, 4050)
    assert response.headers["Allow"] == "POST"


@pytest.mark.parametrize("query", [
    "job_id=a%0A", "job_id=", "job_id=ok&job_id=a%20b",
    "&".join(f"job_id=j{n}" for n in range(101)),
])
async def test_the_event_stream_takes_job_ids_by_the_rule_the_document_says(
        gateway: Gateway, query: str) -> None:
    status, body = await gateway.call("GET", f"/v1/events?{query}", "t1")
    assert_error(status, body, 400, 4000)
    assert "job_id" in body["error"]["message"]
