"""One turn of an actor at a time across gateways: the transaction-scoped advisory lock
each turn takes first on PostgreSQL (``storage/turn_locks.py``)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from leasegate.storage.connection import begin, commit, is_storage_failure, rollback
from leasegate.storage.postgres.connection import PgConnection, connect
from leasegate.storage.turn_locks import lock_turn, turn_lock_key


@pytest.fixture
def gateways(postgres_url: str) -> Iterator[tuple[PgConnection, PgConnection]]:
    a, b = connect(postgres_url), connect(postgres_url)
    yield a, b
    a.close()
    b.close()


def test_keys_are_stable_and_differ_per_actor() -> None:
    keys = {actor: turn_lock_key(actor) for actor in
            ("tasks", "queries", "ledger", "devices", "keys")}
    assert len(set(keys.values())) == len(keys)
    assert all(-(2**63) <= key < 2**63 for key in keys.values())
    assert turn_lock_key("tasks") == keys["tasks"]


def test_a_second_gateway_waits_for_the_first_turns_commit(
        gateways: tuple[PgConnection, PgConnection]) -> None:
    a, b = gateways
    begin(a)
    lock_turn(a, "tasks")
    entered = threading.Event()

    def other_gateway() -> None:
        begin(b)
        lock_turn(b, "tasks")
        entered.set()
        commit(b)

    thread = threading.Thread(target=other_gateway)
    thread.start()
    assert not entered.wait(0.3)  # blocked behind A's turn
    begin_other = time.monotonic()
    commit(a)  # A's turn ends: the lock goes with its transaction
    assert entered.wait(5)
    thread.join()
    assert time.monotonic() - begin_other < 5


def test_turns_of_different_actors_do_not_wait_and_a_long_wait_is_a_storage_failure(
        gateways: tuple[PgConnection, PgConnection]) -> None:
    a, b = gateways
    begin(a)
    lock_turn(a, "tasks")
    begin(b)
    lock_turn(b, "ledger")  # another actor: at once
    rollback(b)
    b.execute("SET lock_timeout = '100ms'")
    begin(b)
    with pytest.raises(psycopg.errors.LockNotAvailable) as waited:
        lock_turn(b, "tasks")
    assert is_storage_failure(waited.value)  # 503, and the turn is retried
    rollback(b)
    rollback(a)


def test_sqlite_needs_no_lock_of_its_own() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    begin(conn)
    lock_turn(conn, "tasks")  # BEGIN IMMEDIATE holds the single writer's lock already
    commit(conn)
