"""The database of either engine, chosen by the ``database_url`` setting::

    db = database_at(settings.database_url, data_dir / "tasks.db", name="tasks")
    await db.start()
    await db.run(migrate)

Unset (None), it is the SQLite file ``leasegate.db`` in the data directory, as it has
always been; a ``postgresql://`` (or ``postgres://``) URL names a PostgreSQL database,
which several gateways may share. Each call makes one connection on one thread
(``thread.ConnectionThread``): an actor has its own, on either engine.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from leasegate.storage import migrations as sqlite_migrations
from leasegate.storage.connection import Database as SqliteDatabase
from leasegate.storage.datadir import db_path
from leasegate.storage.durability import Durability
from leasegate.storage.engine import Connection
from leasegate.storage.wal_sync import Synced, WalSync

T = TypeVar("T")


class Database(Protocol):
    """What both engines' databases offer (``connection.Database``,
    ``postgres.database.Database``): see ``thread.ConnectionThread``."""

    async def start(self) -> None: ...

    async def run(self, fn: Callable[[Connection], T]) -> T: ...

    async def run_committed(self, fn: Callable[[Connection], T]) -> tuple[T, Synced]: ...

    def run_sync(self, fn: Callable[[Connection], T]) -> T: ...

    async def stop(self) -> None: ...

    def close(self) -> None: ...

    async def durability(self) -> Durability: ...


def database_at(database_url: str | None, sqlite_file: Path, *, synchronous: str = "FULL",
                inline: bool = False, name: str = "leasegate",
                wal_sync: WalSync | None = None) -> Database:
    """A database not connected yet (``await db.start()``): the SQLite file
    ``sqlite_file`` with ``synchronous`` when ``database_url`` is None, else the
    PostgreSQL database it names (``name``: the connection's application name there).
    The URL is the one :class:`leasegate.settings.Settings` checked. ``wal_sync``:
    SQLite's commit pipeline (``connection.Database``)."""
    if database_url is None:
        return SqliteDatabase(sqlite_file, synchronous, inline=inline, wal_sync=wal_sync)
    from leasegate.storage.postgres.database import Database as PostgresDatabase

    return PostgresDatabase(database_url, inline=inline, name=name)


def open_database(database_url: str | None, data_dir: Path, *, synchronous: str = "FULL",
                  inline: bool = False, name: str = "leasegate") -> Database:
    """:func:`database_at` of the data directory's database file, connected now
    (blocking: for the command line and tests)."""
    if database_url is None:
        return SqliteDatabase.open(db_path(data_dir), synchronous, inline=inline)
    from leasegate.storage.postgres.database import Database as PostgresDatabase

    return PostgresDatabase.open(database_url, inline=inline, name=name)


def migrate(conn: Connection) -> list[int]:
    """Bring the schema of ``conn``'s database up to date with its engine's runner;
    the versions applied (the same numbers on both engines)."""
    if isinstance(conn, sqlite3.Connection):
        return sqlite_migrations.migrate(conn)
    from leasegate.storage.postgres.connection import PgConnection
    from leasegate.storage.postgres.migrations import migrate as migrate_postgres

    assert isinstance(conn, PgConnection), conn
    return migrate_postgres(conn)
