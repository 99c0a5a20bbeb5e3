"""PostgreSQL's LISTEN/NOTIFY between gateways: what one gateway's commits tell the others.

A writer calls ``notices_sql.notify`` inside its transaction: PostgreSQL delivers the
notification only if that transaction commits, and only after it did, so a listener is
never told of work it cannot see yet, nor of work that was rolled back. A
:class:`Listener` keeps one connection of its own listening on :data:`CHANNEL` and
hands each batch of payloads to ``deliver`` on the trio thread::

    listener = Listener(url, deliver=on_payloads, resync=on_reconnect)
    nursery.start_soon(listener.run)
    ...
    notify(conn, ['{"g": "a1", ...}'])   # in a write transaction, before COMMIT

It waits on the connection's socket from the trio loop (``wait_readable``), so it
costs no thread and stops at once when cancelled. A lost connection (the server
restarted, a failover, a network cut noticed by the TCP keepalives) is made again after
``retry`` seconds; notifications sent meanwhile are lost, so ``resync`` is called after
every (re)connection, once LISTEN holds: the caller then looks again at everything a
notification could have told it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
import trio
from psycopg import pq

from leasegate.logs import Throttled
from leasegate.storage.notices_sql import CHANNEL
from leasegate.storage.postgres.connection import PgConnection, connect

log = logging.getLogger("leasegate.storage")


class Listener:
    """LISTEN on :data:`CHANNEL` on a connection of its own (see the module docstring).

    ``deliver(payloads)`` and ``resync()`` run on the trio thread and must be quick and
    not raise. ``connected`` says whether LISTEN holds now (for /health)."""

    def __init__(self, url: str, *, deliver: Callable[[list[str]], None],
                 resync: Callable[[], None], retry: float = 1.0,
                 name: str = "leasegate-listener", error_log_window: float = 600.0,
                 inline: bool = False) -> None:
        self.url = url
        self.deliver = deliver
        self.resync = resync
        self.retry = retry
        self.name = name
        self.connected = False
        self.connections = 0  # made so far: 1 + reconnections
        self._inline = inline  # connect on the trio thread (tests: no thread, no clock jump)
        self._log = Throttled(log, error_log_window)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Listen until cancelled, reconnecting when the connection is lost. Started
        once the first attempt to connect is over (made or failed: a gateway that
        cannot reach its database fails elsewhere, loudly)."""
        started = False
        while True:
            conn = await self._connect()
            if not started:
                task_status.started()
                started = True
            if conn is None:
                await trio.sleep(self.retry)
                continue
            try:
                self.connected = True
                self.connections += 1
                if self.connections > 1:
                    self._log.recovered(f"{self.name}: listening again")
                self.resync()
                await self._receive(conn)
            except psycopg.Error as exc:
                self._log.warning(trio.current_time(), "%s: connection lost, reconnecting: %s",
                                  self.name, exc)
            finally:
                self.connected = False
                conn.close()
            await trio.sleep(self.retry)

    async def _connect(self) -> PgConnection | None:
        abandoned = False

        def connect_and_listen() -> PgConnection:
            conn = connect(self.url, application_name=self.name)
            try:
                conn.execute(f"LISTEN {CHANNEL}")
            except BaseException:
                conn.close()
                raise
            if abandoned:  # the caller was cancelled meanwhile: nobody will close it
                conn.close()
            return conn

        try:
            if self._inline:
                await trio.lowlevel.checkpoint()
                return connect_and_listen()
            return await trio.to_thread.run_sync(connect_and_listen, abandon_on_cancel=True)
        except psycopg.Error as exc:
            self._log.warning(trio.current_time(), "%s: cannot connect to listen: %s",
                              self.name, exc)
            return None
        except trio.Cancelled:
            abandoned = True
            raise

    async def _receive(self, conn: PgConnection) -> None:
        """Deliver what arrives, a batch per read, until the connection fails."""
        pgconn = conn.raw.pgconn
        while True:
            await trio.lowlevel.wait_readable(pgconn.socket)
            pgconn.consume_input()  # raises OperationalError once the connection is lost
            if pgconn.status != pq.ConnStatus.OK:  # ended by the server (a FATAL message)
                raise psycopg.OperationalError("the server ended the listening session")
            payloads: list[str] = []
            while (note := pgconn.notifies()) is not None:
                payloads.append(note.extra.decode())
            if payloads:
                self.deliver(payloads)
