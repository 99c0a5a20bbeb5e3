"""The verified-key cache: revocations still count from the next request, entries
expire, and nothing a caller invents makes it (or the unknown-id memory) grow."""

from __future__ import annotations

import trio
from trio.testing import MockClock

from leasegate.actors.keys.records import CreateKey, RevokeKey
from leasegate.http.server.auth import VERIFIED_SECONDS, Authenticator
from tests.conftest import Gateway

LEASE = {"worker_id": "w1", "wait_seconds": 0}


async def lease(gateway: Gateway, key: str) -> int:
    status, _ = await gateway.call("POST", "/v1/queries/lease", json=LEASE,
                                   headers={"Authorization": f"Bearer {key}"})
    return status


def authenticator(gateway: Gateway) -> Authenticator:
    found: Authenticator = gateway.app.extensions["leasegate.auth"]
    return found


async def test_a_key_revoked_through_the_api_is_refused_on_the_next_request(
        gateway: Gateway) -> None:
    for _ in range(3):  # verified and cached
        assert await lease(gateway, gateway.keys["worker"]) == 200
    key_id = gateway.keys["worker"].split("_")[1]
    assert (await gateway.call("DELETE", f"/v1/admin/keys/{key_id}", "admin"))[0] == 200
    status, body = await gateway.call("POST", "/v1/queries/lease", "worker", json=LEASE)
    assert status == 401 and body["error"]["message"] == "this API key was revoked"


async def test_a_key_revoked_behind_the_apis_back_is_refused_once_its_entry_expires(
        gateway: Gateway, autojump_clock: MockClock) -> None:
    assert await lease(gateway, gateway.keys["worker"]) == 200
    # As a restored backup would: the key changes without the HTTP layer being told.
    await gateway.system.keys.ask(RevokeKey(gateway.keys["worker"].split("_")[1]))
    await trio.sleep(VERIFIED_SECONDS + 1)
    assert await lease(gateway, gateway.keys["worker"]) == 401


async def test_a_wrong_secret_is_refused_even_for_a_cached_key(gateway: Gateway) -> None:
    assert await lease(gateway, gateway.keys["worker"]) == 200
    wrong = gateway.keys["worker"][:-2] + ("xx" if not gateway.keys["worker"].endswith("xx")
                                           else "yy")
    assert await lease(gateway, wrong) == 401
    assert await lease(gateway, gateway.keys["worker"]) == 200


async def test_invented_keys_do_not_grow_the_cache(gateway: Gateway) -> None:
    auth = authenticator(gateway)
    auth.verified.capacity = 3
    auth.unknown.capacity = 20
    auth.address_limiter.rate = 0  # off: every invented key reaches the checks
    valid = [gateway.keys["worker"], gateway.keys["admin"]]
    for n in range(3):
        created = await gateway.system.keys.ask(CreateKey("worker", f"w{n}", None))
        valid.append(created.key)
    key_id = gateway.keys["worker"].split("_")[1]
    for n in range(100):
        for invented in (f"lg_{n:012x}_secret", f"lg_{key_id}_wrong{n}"):
            assert await lease(gateway, invented) == 401
        assert len(auth.verified) <= 3 and len(auth.unknown._until) <= 20
    for key in valid * 2:  # more keys than entries: the least recently used is looked up again
        assert await lease(gateway, key) == 200
        assert len(auth.verified) <= 3
