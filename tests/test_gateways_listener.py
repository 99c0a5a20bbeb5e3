"""What crosses gateways through PostgreSQL, at the storage layer: a notification is
delivered once its transaction commits and never for one rolled back; a listener whose
connection is killed listens again and says so (``resync``); a reader tailing the events
table by id hands out no id a lower one can follow, so it misses nothing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from leasegate.storage import events_sql
from leasegate.storage.connection import begin, commit, rollback, transaction
from leasegate.storage.database import migrate
from leasegate.storage.notices_sql import notify
from leasegate.storage.postgres.connection import PgConnection, connect
from leasegate.storage.postgres.listener import Listener


class Heard:
    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.resyncs = 0
        self.changed = trio.Event()

    def deliver(self, payloads: list[str]) -> None:
        self.payloads += payloads
        self._changed()

    def resync(self) -> None:
        self.resyncs += 1
        self._changed()

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, condition: object) -> None:
        with trio.fail_after(10):
            while not callable(condition) or not condition():
                await self.changed.wait()


@asynccontextmanager
async def listening(postgres_url: str) -> AsyncIterator[tuple[Heard, Listener]]:
    """A listener running for the block, connected (its first resync heard)."""
    heard = Heard()
    listener = Listener(postgres_url, deliver=heard.deliver, resync=heard.resync, retry=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        await heard.until(lambda: heard.resyncs == 1)
        yield heard, listener
        nursery.cancel_scope.cancel()


async def test_a_notification_arrives_after_its_commit_and_never_for_a_rollback(
        postgres_url: str) -> None:
    writer = connect(postgres_url)
    async with listening(postgres_url) as (heard, _):
        begin(writer)
        notify(writer, ["rolled back"])
        rollback(writer)
        begin(writer)
        notify(writer, ["one", "two"])
        await trio.sleep(0.05)  # the server holds them until the commit
        assert heard.payloads == []
        commit(writer)
        await heard.until(lambda: heard.payloads == ["one", "two"])
    writer.close()


async def test_a_listener_whose_session_is_killed_listens_again_and_resyncs(
        postgres_url: str) -> None:
    admin = connect(postgres_url)
    async with listening(postgres_url) as (heard, listener):
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = ?", (listener.name,))
        await heard.until(lambda: heard.resyncs == 2)
        assert listener.connected and listener.connections == 2
        with transaction(admin):
            notify(admin, ["after"])
        await heard.until(lambda: heard.payloads == ["after"])
    admin.close()


def _event(conn: PgConnection, n: int) -> int:
    row = {"tenant": "acme", "site": "shop", "device_id": None, "status": "queued",
           "kind": "echo"}
    made = events_sql.append(conn, "query", f"q{n}", "submitted", "{}", 1.0, row)
    assert made is not None
    return int(made["event_id"])


def test_a_tail_hands_out_no_id_a_lower_one_can_follow(postgres_url: str) -> None:
    """Two writers do not wait for each other; the reader holds back a later id while a
    lower one is in flight, hands both out once it commits, and skips an id whose
    transaction rolled back once every transaction that could hold it has ended: a
    reader that has handed out id n has handed out every id below n that will ever be."""
    first, second, reader = (connect(postgres_url) for _ in range(3))
    migrate(first)
    order = events_sql.CommitOrder()
    begin(first)
    early = _event(first, 1)
    later = _second(second)  # commits at once: no lock waits for the first
    assert later > early
    assert order.read(reader, 0, 10)[0] == []  # held back behind the one in flight
    assert order.read(reader, 0, 10)[1]
    commit(first)
    rows, held_back = order.read(reader, 0, 10)
    assert [r["event_id"] for r in rows] == [early, later] and not held_back
    begin(first)
    lost = _event(first, 3)
    last = _second(second)
    assert [r["event_id"] for r in order.read(reader, later, 10)[0]] == []
    rollback(first)
    # Other databases' transactions on the same server may hold the horizon a moment.
    deadline = time.monotonic() + 10
    while (read := order.read(reader, later, 10))[1] and time.monotonic() < deadline:
        time.sleep(0.01)
    rows, held_back = read
    assert [r["event_id"] for r in rows] == [last] and not held_back
    assert lost < last
    for conn in (first, second, reader):
        conn.close()


def _second(conn: PgConnection) -> int:
    with transaction(conn):
        return _event(conn, 2)
