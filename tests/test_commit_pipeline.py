"""SQLite's commit pipeline keeps "durable before acknowledged": a turn commits without
syncing, the next turn applies while the WAL syncs, and nobody is answered before a
sync that covers their commit has returned.

The disk here is the test's: the WAL's sync is a hook that records what a power cut
at each moment would leave (the files as the last completed sync saw them), and can
be held, so that the moment between a COMMIT and its sync lasts as long as the test
needs. Real threads (the database's, the sync's): no autojump clock, and no sleeping
either; every wait is on an event the code under test sets.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from leasegate.actors.queries.actor import open_queries
from leasegate.actors.queries.lease import LeaseQueries
from leasegate.actors.queries.submit import SubmitQuery
from leasegate.clock import Clock
from leasegate.settings import Settings
from leasegate.storage.connection import Database
from leasegate.storage.database import migrate
from leasegate.storage.wal_sync import WalSync, WalSyncFailed
from tests.conftest import EPOCH


class Disk(WalSync):
    """A WAL sync whose ``fsync`` records each completed sync's image of the files,
    can be held (:attr:`gate`) or fail, and tells the test each sync asked for."""

    def __init__(self, path: Path, cuts: Path) -> None:
        super().__init__(path, fsync=self._fsync)
        self.cuts = cuts
        self.gate = threading.Event()
        self.gate.set()
        self.failing = False
        self.images: list[tuple[bytes, bytes]] = []  # (database, WAL) per completed sync
        self.token = trio.lowlevel.current_trio_token()
        self._asked, self.asked = trio.open_memory_channel[None](1000)

    def after_sync(self, then: Any) -> None:
        super().after_sync(then)  # on a connection's thread, right after its COMMIT
        self.token.run_sync_soon(self._asked.send_nowait, None)

    def _fsync(self, fd: int) -> None:
        image = (self.db_file.read_bytes(), self.wal_file.read_bytes())  # what it makes durable
        self.gate.wait()
        if self.failing:
            raise OSError(errno.EIO, "I/O error")
        os.fdatasync(fd)
        self.images.append(image)

    def after_a_cut(self) -> dict[str, str]:
        """Each query's status in what a power cut now would leave."""
        cut = self.cuts / f"cut-{len(list(self.cuts.iterdir()))}"
        cut.mkdir()
        database, wal = self.images[-1]
        (cut / "leasegate.db").write_bytes(database)
        (cut / "leasegate.db-wal").write_bytes(wal)
        conn = sqlite3.connect(cut / "leasegate.db")
        try:
            return dict(conn.execute("SELECT query_id, status FROM queries").fetchall())
        finally:
            conn.close()


@pytest.fixture
async def disk(tmp_path: Path) -> AsyncIterator[Disk]:
    path = tmp_path / "leasegate.db"
    Database.open(path, "FULL").run_sync(migrate)
    (tmp_path / "cuts").mkdir()
    disk = Disk(path, tmp_path / "cuts")
    yield disk
    disk.gate.set()
    await trio.to_thread.run_sync(disk.close)


async def pipelined(nursery: trio.Nursery, disk: Disk, settings: Settings) -> Any:
    db = Database(disk.db_file, "FULL", wal_sync=disk)
    await db.start()
    actor = open_queries(db, Clock(EPOCH), settings)
    await nursery.start(actor.run)
    while True:  # the syncs start-up asked for
        try:
            disk.asked.receive_nowait()
        except trio.WouldBlock:
            return actor


def committed(disk: Disk) -> dict[str, str]:
    """Each query's status as any reader sees it now."""
    conn = sqlite3.connect(disk.db_file)
    try:
        return dict(conn.execute("SELECT query_id, status FROM queries").fetchall())
    finally:
        conn.close()


class Caller:
    """One ask in a task of its own; at the instant it is answered, what a power cut
    would leave."""

    def __init__(self, nursery: trio.Nursery, actor: Any, message: Any, disk: Disk) -> None:
        self.answered = trio.Event()
        self.reply: Any = None
        self.cut_at_answer: dict[str, str] = {}

        async def ask() -> None:
            self.reply = await actor.ref.ask(message)
            self.cut_at_answer = disk.after_a_cut()
            self.answered.set()

        nursery.start_soon(ask)


def submit(query_id: str) -> SubmitQuery:
    return SubmitQuery("t1", "shop", "balance", {"a": 1}, query_id)


async def test_an_answer_waits_for_its_sync_while_the_next_turn_applies(
        nursery: trio.Nursery, disk: Disk, settings: Settings) -> None:
    actor = await pipelined(nursery, disk, settings)
    disk.gate.clear()  # the disk holds the next sync: the moment after COMMIT lasts
    first = Caller(nursery, actor, submit("q1"), disk)
    await disk.asked.receive()  # q1's turn committed and asked for its sync
    await trio.testing.wait_all_tasks_blocked()
    assert committed(disk) == {"q1": "queued"}  # visible to readers...
    assert not first.answered.is_set()  # ...but not answered: its sync has not returned
    assert disk.after_a_cut() == {}  # a power cut now may lose it: nobody was told

    second = Caller(nursery, actor, submit("q2"), disk)
    await disk.asked.receive()  # the next turn applied and committed meanwhile
    assert committed(disk) == {"q1": "queued", "q2": "queued"}
    await trio.testing.wait_all_tasks_blocked()
    assert not first.answered.is_set() and not second.answered.is_set()

    disk.gate.set()
    await first.answered.wait()
    await second.answered.wait()
    # At the instant each was answered, a power cut would have kept it.
    assert first.cut_at_answer["q1"] == "queued"
    assert second.cut_at_answer == {"q1": "queued", "q2": "queued"}
    assert disk.commits >= 2 and disk.syncs <= disk.commits + 2  # (start-up's runs too)


async def test_a_lease_of_an_unanswered_submit_is_answered_after_both_are_durable(
        nursery: trio.Nursery, disk: Disk, settings: Settings) -> None:
    actor = await pipelined(nursery, disk, settings)
    disk.gate.clear()
    submitted = Caller(nursery, actor, submit("q1"), disk)
    await disk.asked.receive()
    leased = Caller(nursery, actor, LeaseQueries("w1"), disk)
    await disk.asked.receive()  # the lease's turn read q1 (not durable yet) and committed
    assert committed(disk) == {"q1": "leased"}
    await trio.testing.wait_all_tasks_blocked()
    assert not submitted.answered.is_set() and not leased.answered.is_set()

    disk.gate.set()
    await leased.answered.wait()
    await submitted.answered.wait()
    assert [lease.query_id for lease in leased.reply] == ["q1"]
    # When the worker was told of q1, a power cut would have kept both the submit and
    # the lease: the sync after the lease's COMMIT covers every commit before it.
    assert leased.cut_at_answer == {"q1": "leased"}
    assert submitted.cut_at_answer["q1"] in ("queued", "leased")


async def test_a_failed_sync_answers_nobody_and_stops_the_actor(
        disk: Disk, settings: Settings) -> None:
    answered: list[Any] = []
    with pytest.RaisesGroup(WalSyncFailed, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            actor = await pipelined(nursery, disk, settings)
            disk.failing = True

            async def ask() -> None:
                answered.append(await actor.ref.ask(submit("q1")))

            nursery.start_soon(ask)
    assert answered == []
    # Final: a later sync fails too (the page cache may have dropped what failed).
    disk.failing = False
    with pytest.raises(WalSyncFailed):
        disk.sync_now()


async def test_run_returns_once_a_sync_covers_what_it_did(disk: Disk) -> None:
    db = Database(disk.db_file, "FULL", wal_sync=disk)
    await db.start()
    try:
        synced = len(disk.images)
        await db.run(lambda conn: conn.execute("PRAGMA user_version").fetchone())
        assert len(disk.images) == synced + 1
    finally:
        await db.stop()


@pytest.mark.parametrize(("setting", "durable"), [("FULL", True), ("EXTRA", True),
                                                  ("NORMAL", False), ("OFF", False)])
async def test_the_pipeline_commits_with_normal_and_is_durable_only_behind_full(
        disk: Disk, setting: str, durable: bool) -> None:
    db = Database(disk.db_file, setting, wal_sync=disk)
    await db.start()
    try:
        level = await db.run(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0])
        assert level == {"FULL": 1, "EXTRA": 1, "NORMAL": 1, "OFF": 0}[setting]
        assert (await db.durability()).durable is durable
    finally:
        await db.stop()
    without = Database(disk.db_file, setting)  # no pipeline: SQLite's own syncs
    await without.start()
    try:
        assert (await without.durability()).durable is durable
    finally:
        await without.stop()
