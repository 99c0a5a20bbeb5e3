"""Task lanes with several gateways on one PostgreSQL database: changes of one lane take
turns on its row, so a lane never has two tasks in flight and never loses its head,
whichever transaction commits first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from leasegate.storage import lanes_sql, tasks_sql
from leasegate.storage.connection import begin, commit
from leasegate.storage.postgres.connection import PgConnection, connect
from leasegate.storage.postgres.migrations import migrate
from tests.test_sql_engines import NOW, submit


@pytest.fixture
def gateways(postgres_url: str) -> Iterator[tuple[PgConnection, PgConnection]]:
    """Two gateways' connections to one migrated database."""
    a, b = connect(postgres_url), connect(postgres_url)
    migrate(a)
    yield a, b
    a.close()
    b.close()


class Behind:
    """``step(conn)`` in a transaction of its own on another thread, once it waits for a
    lock that the test's open transaction holds."""

    def __init__(self, conn: PgConnection, step: Callable[[PgConnection], Any]) -> None:
        self.result: list[Any] = []
        pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])

        def run() -> None:
            begin(conn)
            self.result.append(step(conn))
            commit(conn)

        self.thread = threading.Thread(target=run)
        self.thread.start()
        watcher = connect(conn.raw.info.dsn)  # asks the server; no sleep
        deadline = time.monotonic() + 10
        while not watcher.execute("SELECT cardinality(pg_blocking_pids(?)) > 0",
                                  (pid,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the other gateway never waited"
        watcher.close()

    def finish(self) -> Any:
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        return self.result[0]


def lane(conn: PgConnection) -> tuple[Any, ...]:
    row = conn.execute("SELECT blocked_by, head_task FROM task_lanes "
                       "WHERE site = 's' AND account = 'a'").fetchone()
    return tuple(row) if row is not None else ()


def lease(task_id: str) -> Callable[[PgConnection], bool]:
    return lambda conn: tasks_sql.take_leases(conn, [(task_id, f"tok-{task_id}")], "w", None,
                                              NOW + 30, NOW) != []


def test_two_gateways_leasing_two_tasks_of_one_lane_put_one_in_flight(
        gateways: tuple[PgConnection, PgConnection]) -> None:
    a, b = gateways
    submit(a, "t1", priority=1)
    submit(a, "t2")
    begin(a)
    assert lease("t1")(a)
    behind = Behind(b, lease("t2"))  # B read the lane as free before A committed
    commit(a)
    assert behind.finish() is False  # B's lease changed nothing: no second in flight
    assert lane(a) == ("t1", "t2")
    statuses = dict(a.execute("SELECT task_id, status FROM tasks").fetchall())
    assert statuses == {"t1": "leased", "t2": "queued"}


def test_a_submit_waiting_behind_a_lease_is_still_the_lanes_head(
        gateways: tuple[PgConnection, PgConnection]) -> None:
    a, b = gateways
    submit(a, "t1")
    submit(a, "t2")
    begin(a)
    assert lease("t1")(a)  # A's refresh of the lane computed its head: t2
    behind = Behind(b, lambda conn: submit(conn, "t9", priority=9))
    commit(a)
    assert behind.finish() is True
    assert lane(a) == ("t1", "t9")


def test_a_lease_waiting_behind_a_submit_sees_it(
        gateways: tuple[PgConnection, PgConnection]) -> None:
    a, b = gateways
    submit(a, "t1")
    begin(a)
    assert submit(a, "t9", priority=9)  # not committed yet: B's snapshot lacks it
    behind = Behind(b, lease("t1"))
    commit(a)
    assert behind.finish() is True
    assert lane(a) == ("t1", "t9")  # the refresh after the lock read t9
    assert [r["task_id"] for r in lanes_sql.next_leasable(a, None, NOW, 10)] == []
