"""A revoked key gets nothing new anywhere: its parked lease polls end with 401 and are
never handed work submitted after the revocation, its event streams end at once, and
a revocation by the CLI (another process) reaches a running gateway within a second.
Its requests are told the key was revoked, and every 401 says how to authenticate.
Time is virtual (autojump)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.cli import main
from leasegate.clock import Clock
from leasegate.settings import Settings
from tests.conftest import Gateway, start_gateway
from tests.test_http_tasks import get, lease_one, submit

pytestmark = pytest.mark.both_engines

Json = dict[str, Any]
REVOKED = "this API key was revoked"
POLL = {"worker_id": "w1", "wait_seconds": 30}


def key_id(gateway: Gateway, who: str) -> str:
    return gateway.keys[who].split("_")[1]


class Waiting:
    """A request sent in the background, answered (``reply``) once it ends."""

    def __init__(self) -> None:
        self.reply: tuple[int, Any] | None = None
        self.at: float | None = None  # the virtual time it was answered

    async def send(self, gateway: Gateway, method: str, path: str, who: str,
                   body: Json | None = None) -> None:
        self.reply = await gateway.call(method, path, who, json=body)
        self.at = trio.current_time()


async def revoke(gateway: Gateway, who: str) -> None:
    status, body = await gateway.call("DELETE", f"/v1/admin/keys/{key_id(gateway, who)}",
                                      "admin")
    assert status == 200, body


async def test_a_parked_lease_poll_of_a_revoked_key_ends_with_401_and_no_later_task(
        gateway: Gateway, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    poll = Waiting()
    nursery.start_soon(poll.send, gateway, "POST", "/v1/tasks/lease", "worker", POLL)
    await trio.testing.wait_all_tasks_blocked()
    assert poll.reply is None  # parked
    revoked_at = trio.current_time()
    await revoke(gateway, "worker")
    # Submitted once the revocation was answered: never handed to the revoked key's poll.
    task_id = (await submit(gateway))["task_id"]
    await trio.testing.wait_all_tasks_blocked()
    assert poll.reply is not None and poll.at == revoked_at  # ended at once
    status, body = poll.reply
    assert (status, body["error"]["code"], body["error"]["message"]) == (401, 4010, REVOKED)
    assert (await get(gateway, task_id))["status"] == "queued"
    # Another worker key is handed it, as if the revoked one had never polled.
    made = await gateway.call("POST", "/v1/admin/keys", "admin",
                              json={"role": "worker", "name": "w2"})
    gateway.keys["worker"] = made[1]["key"]
    assert (await lease_one(gateway, "w2"))["task_id"] == task_id


async def test_a_revoked_keys_event_stream_ends_at_once(
        gateway: Gateway, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    stream = Waiting()
    nursery.start_soon(stream.send, gateway, "GET", "/v1/events", "t1")
    other = Waiting()  # another tenant's stream goes on
    nursery.start_soon(other.send, gateway, "GET", "/v1/events", "t2")
    await trio.testing.wait_all_tasks_blocked()
    assert stream.reply is None and other.reply is None  # streaming
    revoked_at = trio.current_time()
    await revoke(gateway, "t1")
    await trio.testing.wait_all_tasks_blocked()
    assert stream.reply is not None and stream.at == revoked_at
    assert stream.reply[0] == 200  # it had begun: it ends, its client reconnects and gets 401
    assert other.reply is None
    status, body = await gateway.call("GET", "/v1/events", "t1")
    assert (status, body["error"]["message"]) == (401, REVOKED)
    status, body = await gateway.call("GET", "/v1/tasks", "t2")
    assert status == 200


async def test_a_revocation_by_the_cli_ends_the_keys_polls_within_a_second(
        nursery: trio.Nursery, tmp_path: Path, settings: Settings, clock: Clock,
        database_url: str | None, autojump_clock: trio.testing.MockClock) -> None:
    """SQLite: the CLI is another process on the data directory, looked for every
    key_revocation_poll_interval; PostgreSQL: its notification arrives at once."""
    autojump_clock.autojump_threshold = 0.1  # PostgreSQL: the notification's real time
    gateway = await start_gateway(nursery, tmp_path / "leasegate.db",
                                  settings.replace(key_revocation_poll_interval=0.5), clock)
    assert (await gateway.call("GET", "/v1/tasks", "t1"))[0] == 200  # verified, cached
    poll = Waiting()
    nursery.start_soon(poll.send, gateway, "POST", "/v1/tasks/lease", "worker", POLL)
    await trio.testing.wait_all_tasks_blocked()
    where = ["--database", database_url] if database_url else ["--data", str(tmp_path)]
    revoked_at = trio.current_time()
    for who in ("worker", "t1"):
        assert main(["keys", "revoke", key_id(gateway, who), *where]) == 0
    await trio.sleep(1)
    assert poll.reply is not None and poll.at is not None and poll.at - revoked_at <= 0.5
    assert (poll.reply[0], poll.reply[1]["error"]["message"]) == (401, REVOKED)
    status, body = await gateway.call("GET", "/v1/tasks", "t1")  # its cache entry is gone
    assert (status, body["error"]["message"]) == (401, REVOKED)


async def test_a_401_says_why_and_how_to_authenticate(gateway: Gateway) -> None:
    await revoke(gateway, "t2")
    wrong_secret = gateway.keys["t1"][:-4] + ("aaaa" if gateway.keys["t1"][-4:] != "aaaa"
                                              else "bbbb")
    for key, message, challenge in (
            (None, "missing API key (Authorization: Bearer <key>)", 'Bearer realm="leasegate"'),
            ("lg_000000000000_nosuch", "unknown API key",
             'Bearer realm="leasegate", error="invalid_token"'),
            (wrong_secret, "unknown API key",
             'Bearer realm="leasegate", error="invalid_token"'),
            (gateway.keys["t2"], REVOKED, 'Bearer realm="leasegate", error="invalid_token"')):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = await gateway.client.get("/v1/tasks", headers=headers)
        body = await response.get_json()
        assert (response.status_code, body["error"]["code"], body["error"]["message"]) == (
            401, 4010, message), key
        assert response.headers["WWW-Authenticate"] == challenge
    response = await gateway.client.get("/v1/tasks", headers=gateway.auth("worker"))
    assert response.status_code == 403 and "WWW-Authenticate" not in response.headers


@pytest.mark.parametrize("tenant", ["@world", "@holds", "@revenue", "@anything"])
async def test_no_key_for_a_system_account_of_the_ledger(gateway: Gateway,
                                                         tenant: str) -> None:
    for role in ("client", "worker", "admin"):
        status, body = await gateway.call("POST", "/v1/admin/keys", "admin", json={
            "role": role, "name": "sneaky", "tenant": tenant})
        assert (status, body["error"]["code"]) == (400, 4000), body
        assert "system account of the ledger" in body["error"]["message"]
    status, body = await gateway.call("GET", "/v1/admin/keys", "admin")
    assert "sneaky" not in {key["name"] for key in body["items"]}


async def test_an_idle_gateway_looks_for_revocations_only_when_the_database_changed(
        autojump_clock: trio.testing.MockClock) -> None:
    """On SQLite a look is a keys-actor turn (its commit synced): every interval it is
    taken only if the WAL file changed since the last, and always when poked."""
    from leasegate.actors.keys.watch import RevocationWatch

    looks: list[float] = []
    changes = iter([True, False, False, True, False])

    class Keys:
        async def ask(self, message: object) -> int:
            looks.append(trio.current_time())
            return 0

    watch = RevocationWatch(Keys(), every=0.5, changed=lambda: next(changes))  # type: ignore[arg-type]
    for _ in range(5):
        await watch.check_next()
    assert looks == [0.5, 2.0]
    watch.poke()
    await watch.check_next()  # poked: looks whatever the file says
    assert len(looks) == 3
