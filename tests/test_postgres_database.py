"""The PostgreSQL Database: calls on its own thread, a lost connection answered as a
storage failure and replaced on the next call, errors of our SQL kept as bugs, and
whether the server keeps what it acknowledged."""

from __future__ import annotations

from pathlib import Path

import psycopg
import psycopg.errors
import pytest
import trio
import trio.testing

from leasegate.settings import load
from leasegate.storage import migrations as sqlite_migrations
from leasegate.storage.connection import Database as SqliteDatabase
from leasegate.storage.connection import begin, is_storage_failure, rollback
from leasegate.storage.database import database_at, migrate, open_database
from leasegate.storage.durability import Durability
from leasegate.storage.engine import Connection, dialect
from leasegate.storage.postgres import migrations as postgres_migrations
from leasegate.storage.postgres.connection import PgConnection
from leasegate.storage.postgres.database import Database, judge_durability
from leasegate.storage.postgres.failures import Unreachable


def backend(conn: PgConnection) -> int:
    return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])


def terminate(url: str, pid: int) -> None:
    """End a session from another connection, as an administrator or a failover would."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


async def test_calls_run_on_the_connections_own_thread(postgres_url: str,
                                                      autojump_clock: trio.testing.MockClock,
                                                      ) -> None:
    db = Database(postgres_url, name="leasegate test")
    await db.start()
    try:
        name = await db.run(lambda conn: conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone()[0])
        assert name == "leasegate test"
        done: list[int] = []

        def slow_write(conn: PgConnection) -> None:
            conn.execute("CREATE TABLE w (x int)")
            conn.execute("SELECT pg_sleep(0.05)")  # the server is slow; the clock jumps
            conn.execute("INSERT INTO w VALUES (1)")
            done.append(1)

        with trio.move_on_after(1) as caller:  # the caller gives up; the write finishes
            await db.run(slow_write)
        assert caller.cancel_called and done == [1]
        assert await db.run(lambda c: c.execute("SELECT count(*) FROM w").fetchone()[0]) == 1
    finally:
        await db.stop()


def test_a_lost_connection_is_a_storage_failure_and_the_next_call_reconnects(
        postgres_url: str) -> None:
    db = Database.open(postgres_url, inline=True)
    first = db.run_sync(backend)
    terminate(postgres_url, first)

    def write(conn: PgConnection) -> None:
        begin(conn)
        try:
            conn.execute("SELECT 1")
        except BaseException:
            rollback(conn)  # as the runtime does: nothing to roll back on a lost one
            raise

    with pytest.raises(psycopg.OperationalError) as lost:
        db.run_sync(write)
    assert is_storage_failure(lost.value)
    second = db.run_sync(backend)
    assert second != first
    db.close()


def test_a_server_that_does_not_answer_is_a_storage_failure_until_it_does(
        postgres_url: str) -> None:
    db = Database("postgresql://root@127.0.0.1:1/nowhere?connect_timeout=2", inline=True)
    with pytest.raises(Unreachable) as refused:
        db.run_sync(backend)
    assert is_storage_failure(refused.value)
    assert "127.0.0.1" in str(refused.value)
    db.url = postgres_url  # the server is back
    assert db.run_sync(backend) > 0
    db.close()


def test_errors_of_our_sql_are_bugs_not_storage_failures(postgres_url: str) -> None:
    db = Database.open(postgres_url, inline=True)
    db.run_sync(lambda conn: conn.execute("CREATE TABLE u (k text PRIMARY KEY)"))
    db.run_sync(lambda conn: conn.execute("INSERT INTO u VALUES ('a')"))
    for statement in ("SELEC 1", "SELECT nope FROM u", "INSERT INTO u VALUES ('a')",
                      "INSERT INTO u VALUES (NULL)", "SELECT 1 / 0"):
        def run(conn: PgConnection, statement: str = statement) -> None:
            conn.execute(statement)

        with pytest.raises(psycopg.Error) as bug:
            db.run_sync(run)
        assert not is_storage_failure(bug.value), statement
    db.close()


@pytest.mark.parametrize(("error", "failure"), [
    (psycopg.errors.AdminShutdown(), True),          # 57P01: the server stops
    (psycopg.errors.CannotConnectNow(), True),       # 57P03: still starting up
    (psycopg.errors.DiskFull(), True),               # 53100
    (psycopg.errors.TooManyConnections(), True),     # 53300
    (psycopg.errors.OutOfMemory(), True),            # 53200
    (psycopg.errors.SerializationFailure(), True),   # 40001
    (psycopg.errors.DeadlockDetected(), True),       # 40P01
    (psycopg.errors.LockNotAvailable(), True),       # 55P03: lock_timeout
    (psycopg.errors.ReadOnlySqlTransaction(), True), # 25006: a standby, mid-failover
    (psycopg.errors.IoError(), True),                # 58030
    (psycopg.errors.DataCorrupted(), True),          # XX001
    (psycopg.OperationalError("the connection is lost"), True),  # no SQLSTATE: the client
    (psycopg.errors.UniqueViolation(), False),
    (psycopg.errors.CheckViolation(), False),
    (psycopg.errors.SyntaxError(), False),
    (psycopg.errors.UndefinedColumn(), False),
    (psycopg.errors.ObjectNotInPrerequisiteState(), False),
    (psycopg.InterfaceError("misuse"), False),
    (ValueError("not a database error"), False),
])
def test_storage_failures_by_sqlstate(error: Exception, failure: bool) -> None:
    assert is_storage_failure(error) is failure


@pytest.mark.parametrize(("settings", "weakened"), [
    ({"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
      "synchronous_standby_names": ""}, []),
    ({"fsync": "off", "synchronous_commit": "on", "full_page_writes": "on"}, ["fsync=off"]),
    ({"fsync": "on", "synchronous_commit": "off", "full_page_writes": "off"},
     ["synchronous_commit=off", "full_page_writes=off"]),
    # local waits for this server's disk: durable, unless standbys should be waited for
    ({"fsync": "on", "synchronous_commit": "local", "full_page_writes": "on",
      "synchronous_standby_names": ""}, []),
    ({"fsync": "on", "synchronous_commit": "local", "full_page_writes": "on",
      "synchronous_standby_names": "FIRST 1 (standby1)"}, ["synchronous_commit=local"]),
    ({"fsync": "on", "synchronous_commit": "remote_write", "full_page_writes": "on",
      "synchronous_standby_names": "standby1"}, []),
])
def test_durability_is_judged_from_the_servers_settings(
        settings: dict[str, str], weakened: list[str]) -> None:
    judged = judge_durability(settings)
    assert judged.durable is (not weakened)
    assert [reason.split(":")[0] for reason in judged.weakened_by] == weakened


async def test_the_live_servers_durability_as_this_session_sees_it(postgres_url: str) -> None:
    db = Database(postgres_url, inline=True)
    await db.start()
    settings = db.run_sync(lambda conn: {name: conn.execute(f"SHOW {name}").fetchone()[0]
                                         for name in ("fsync", "synchronous_commit",
                                                      "full_page_writes",
                                                      "synchronous_standby_names")})
    assert await db.durability() == judge_durability(settings)
    # A session that turns its commits asynchronous is told so.
    db.run_sync(lambda conn: conn.execute("SET synchronous_commit = off"))
    weakened = await db.durability()
    assert not weakened.durable
    assert any(r.startswith("synchronous_commit=off") for r in weakened.weakened_by)
    assert isinstance(weakened, Durability)
    await db.stop()


def test_the_database_url_chooses_the_engine(postgres_url: str, tmp_path: Path) -> None:
    settings = load(environ={"LEASEGATE_DATABASE_URL": postgres_url})
    assert settings.database_url == postgres_url
    assert postgres_url not in repr(settings)  # a URL may carry a password
    pg = open_database(settings.database_url, tmp_path, inline=True)
    lite = open_database(load(environ={}).database_url, tmp_path, synchronous="OFF",
                         inline=True)
    assert isinstance(pg, Database) and isinstance(lite, SqliteDatabase)
    for db, engine in ((pg, "postgresql"), (lite, "sqlite")):
        def check(conn: Connection, engine: str = engine) -> list[int]:
            assert dialect(conn) == engine
            return migrate(conn)

        every = [n for n, _, _ in (postgres_migrations if engine == "postgresql"
                                   else sqlite_migrations).MIGRATIONS]
        assert db.run_sync(check) == every
        db.close()
    assert (tmp_path / "leasegate.db").is_file()
    assert isinstance(database_at(postgres_url, tmp_path / "leasegate.db"), Database)


def test_a_table_changed_under_a_prepared_statement_costs_one_call(postgres_url: str) -> None:
    """Another gateway migrates: this one's prepared SELECT * fails once, as a storage
    failure, and the next call reads the new column on a new connection."""
    db = Database.open(postgres_url, inline=True)
    db.run_sync(lambda conn: conn.execute("CREATE TABLE x (k text)"))

    def read(conn: PgConnection) -> list[str]:
        row = conn.execute("SELECT * FROM x WHERE k IS NOT NULL").fetchone()
        return list(row.keys())

    db.run_sync(lambda conn: conn.execute("INSERT INTO x VALUES ('a')"))
    for _ in range(6):  # psycopg prepares it
        assert db.run_sync(read) == ["k"]
    with psycopg.connect(postgres_url, autocommit=True) as other:
        other.execute("ALTER TABLE x ADD COLUMN y int")
    with pytest.raises(psycopg.OperationalError) as changed:
        db.run_sync(read)
    assert is_storage_failure(changed.value)
    assert db.run_sync(read) == ["k", "y"]
    db.close()
