"""Narrow locks across gateways (``storage/turn_locks.py``): a turn waits only for turns
about the same thing (an account, a device, a key's workers), never for a whole actor;
a shared scope waits only for its exclusive holder; SQLite needs none."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from leasegate.storage.connection import begin, commit, is_storage_failure, rollback
from leasegate.storage.postgres.connection import PgConnection, connect
from leasegate.storage.turn_locks import Shared, lock_scopes, scope_key


@pytest.fixture
def gateways(postgres_url: str) -> Iterator[tuple[PgConnection, PgConnection]]:
    a, b = connect(postgres_url), connect(postgres_url)
    yield a, b
    a.close()
    b.close()


def test_keys_are_stable_and_differ_per_scope() -> None:
    keys = {scope: scope_key(scope) for scope in
            ("ledger account acme", "ledger account bolt", "devices capacity", "keys first")}
    assert len(set(keys.values())) == len(keys)
    assert all(-(2**63) <= key < 2**63 for key in keys.values())
    assert scope_key("ledger account acme") == keys["ledger account acme"]


def test_a_second_gateway_waits_for_the_first_turns_commit_on_the_same_scope_only(
        gateways: tuple[PgConnection, PgConnection]) -> None:
    a, b = gateways
    begin(a)
    lock_scopes(a, ["ledger account acme"])
    begin(b)
    lock_scopes(b, ["ledger account bolt"])  # another account: at once
    commit(b)
    entered = threading.Event()

    def other_gateway() -> None:
        begin(b)
        lock_scopes(b, ["ledger account bolt", "ledger account acme"])
        entered.set()
        commit(b)

    thread = threading.Thread(target=other_gateway)
    thread.start()
    assert not entered.wait(0.3)  # blocked behind A's turn on acme
    begin_other = time.monotonic()
    commit(a)  # A's turn ends: the lock goes with its transaction
    assert entered.wait(5)
    thread.join()
    assert time.monotonic() - begin_other < 5


def test_shared_scopes_wait_only_for_the_exclusive_holder(
        gateways: tuple[PgConnection, PgConnection]) -> None:
    """Submits of given ids beside each other; a purge waits for them, and they for it."""
    a, b = gateways
    begin(a)
    lock_scopes(a, [Shared("job ids tasks")])
    begin(b)
    lock_scopes(b, [Shared("job ids tasks")])  # another submit: at once
    rollback(b)
    b.execute("SET lock_timeout = '100ms'")
    begin(b)
    with pytest.raises(psycopg.errors.LockNotAvailable) as waited:
        lock_scopes(b, ["job ids tasks"])  # the purge
    assert is_storage_failure(waited.value)  # 503, and the turn is retried
    rollback(b)
    rollback(a)


def test_sqlite_needs_no_lock_of_its_own() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    begin(conn)
    lock_scopes(conn, ["ledger account acme"])  # BEGIN IMMEDIATE holds the writer's lock
    commit(conn)
