"""One PostgreSQL connection on one dedicated thread, as SQLite's (``thread.py``).

Each actor has its own connection, so a gateway holds one per actor plus one for
set-up; there is no pool to share (a call never waits for another actor's). A
connection found lost is replaced on the next call: the call that met the loss failed
as a storage failure (503), the next one reconnects, so a gateway rides out a server
restart or a failover without restarting itself::

    db = Database.open("postgresql://root@127.0.0.1:5432/leasegate")
    count = await db.run(lambda conn: conn.execute("SELECT count(*) FROM tasks").fetchone()[0])
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

import psycopg
import trio

from leasegate.storage.durability import Durability
from leasegate.storage.postgres.connection import PgConnection, connect
from leasegate.storage.postgres.failures import Unreachable
from leasegate.storage.thread import ConnectionThread

log = logging.getLogger("leasegate.storage")

DURABILITY_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes",
                       "synchronous_standby_names")


class Database(ConnectionThread[PgConnection]):
    """A PostgreSQL connection and the thread that owns it. ``url`` is a libpq URL
    (``postgresql://user@host:port/database?...``); ``name`` shows in the server's
    ``pg_stat_activity`` as the connection's application name."""

    thread_name = "leasegate-postgres"

    def __init__(self, url: str, *, inline: bool = False, name: str = "leasegate") -> None:
        super().__init__(inline=inline)
        self.url = url
        self.name = name

    @classmethod
    def open(cls, url: str, *, inline: bool = False, name: str = "leasegate") -> Database:
        """A database connected now (blocking: not for the event loop)."""
        db = cls(url, inline=inline, name=name)
        db._open_now()
        return db

    def _connect(self) -> PgConnection:
        try:
            return connect(self.url, application_name=self.name)
        except psycopg.Error as exc:  # the message names host and port, never a password
            raise Unreachable(f"cannot connect to PostgreSQL: {exc}") from exc

    def _disconnect(self, conn: PgConnection) -> None:
        conn.close()

    def _connection(self) -> PgConnection:
        """The open connection, or a new one if there is none or it was lost."""
        if self._open_error is not None:  # connecting at start failed: tell that once
            error, self._open_error = self._open_error, None
            raise error
        conn = self._conn
        if conn is None or conn.broken:
            self._conn = None
            if conn is not None:
                conn.close()
            conn = self._conn = self._connect()
        return conn

    async def durability(self) -> Durability:
        """Whether the server keeps every commit it acknowledged to this gateway's
        sessions through a crash (:func:`judge_durability`). Cancellation: as
        :meth:`run`."""
        return await self.run(read_durability)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<postgres Database {self.name} inline={self._inline}>"


def read_durability(conn: PgConnection) -> Durability:
    """The server's settings as this session sees them, judged."""
    rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name IN (?, ?, ?, ?)",
                        DURABILITY_SETTINGS).fetchall()
    return judge_durability({row["name"]: row["setting"] for row in rows})


def judge_durability(settings: Mapping[str, str]) -> Durability:
    """Durable unless a setting lets an acknowledged commit be lost by a crash or power
    cut of the server: ``fsync = off``, ``synchronous_commit = off``, ``full_page_writes
    = off``. ``synchronous_commit = local`` waits for the server's own disk, as ``on``
    does: it weakens only where synchronous standbys are named (its commits do not wait
    for them, so a failover to one can lose them). ``remote_write`` and ``remote_apply``
    flush locally first: durable."""
    weakened: list[str] = []
    if settings.get("fsync") == "off":
        weakened.append("fsync=off: the server never forces its writes to disk, a crash "
                        "can lose or corrupt committed data")
    commit = settings.get("synchronous_commit")
    if commit == "off":
        weakened.append("synchronous_commit=off: a commit is acknowledged before it is on "
                        "disk, a crash loses the last ones")
    elif commit == "local" and settings.get("synchronous_standby_names", "").strip():
        weakened.append("synchronous_commit=local: commits do not wait for the synchronous "
                        "standbys, a failover to one loses the last ones")
    if settings.get("full_page_writes") == "off":
        weakened.append("full_page_writes=off: a crash in the middle of a page write can "
                        "leave the page torn")
    return Durability(tuple(weakened))


# Waiting for a database that is starting: the first retry soon, then less often.
FIRST_RETRY_SECONDS = 0.5
LONGEST_RETRY_SECONDS = 5.0


async def wait_until_reachable(url: str, give_up_after: float) -> None:
    """Return once the PostgreSQL database ``url`` names accepts a connection, trying
    again with a doubling pause (0.5 s up to 5 s) and a log line for each failed try, for up
    to ``give_up_after`` seconds; then raise :class:`Unreachable` with the last reason. Made
    for start-up: under docker-compose or systemd a gateway often starts before its
    database. Cancellation: a try under way finishes on its thread (libpq's own
    ``connect_timeout`` bounds it) and its connection is closed."""
    deadline = trio.current_time() + give_up_after
    pause, attempt = FIRST_RETRY_SECONDS, 1
    while True:
        try:
            conn = await trio.to_thread.run_sync(functools.partial(
                connect, url, application_name="leasegate-start"))
        except psycopg.Error as exc:
            left = deadline - trio.current_time()
            said = str(exc).strip()
            reason = said.splitlines()[0] if said else type(exc).__name__
            if left <= 0:
                raise Unreachable(f"cannot connect to PostgreSQL (waited {give_up_after:g} s, "
                                  f"database_connect_timeout): {reason}") from exc
            wait = min(pause, left)
            log.warning("PostgreSQL not reachable yet (try %d): %s; trying again in %.1f s",
                        attempt, reason, wait)
            await trio.sleep(wait)
            pause, attempt = min(pause * 2, LONGEST_RETRY_SECONDS), attempt + 1
        else:
            conn.close()
            return
