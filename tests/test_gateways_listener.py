"""What crosses gateways through PostgreSQL, at the storage layer: a notification is
delivered once its transaction commits and never for one rolled back; a listener whose
connection is killed listens again and says so (``resync``); event ids are handed out
in commit order, so a reader tailing the table by id misses nothing."""

from __future__ import annotations

import threading
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


def test_event_ids_are_handed_out_in_commit_order_across_connections(
        postgres_url: str) -> None:
    """A second writer's event waits for the first's transaction: the lower id commits
    first, so a reader that has seen id n has seen every id below n that will ever be."""
    first, second, reader = (connect(postgres_url) for _ in range(3))
    migrate(first)
    begin(first)
    early = _event(first, 1)
    took: list[int] = []
    waiting = threading.Thread(target=lambda: took.append(_second(second)))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # held back until the first commits
    assert [r["event_id"] for r in events_sql.after(reader, 0, 10)] == []
    commit(first)
    waiting.join(5)
    assert took and took[0] > early
    assert [r["event_id"] for r in events_sql.after(reader, 0, 10)] == [early, took[0]]
    assert events_sql.committed_last_event_id(reader) == took[0]
    for conn in (first, second, reader):
        conn.close()


def _second(conn: PgConnection) -> int:
    with transaction(conn):
        return _event(conn, 2)
