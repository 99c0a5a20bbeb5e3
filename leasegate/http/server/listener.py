"""Accepting connections: a bound per client address and in all, quiet through
EMFILE.

hypercorn's trio worker accepts with ``trio.serve_listeners``, which takes every
connection it can and, once the process is out of file descriptors, logs each
failed accept at ERROR with a traceback, ten times a second. :func:`serve_http`
is that worker with an accept loop of ours in front of hypercorn's own
connection handler (``TCPServer``: HTTP/1.1 and HTTP/2 as before):

* a connection past ``max_connections_per_address`` for its address (IPv6: its
  /64) or past the total bound is closed as soon as it is accepted, before a
  byte of it is read. That costs no task, parser or buffer, and hands the
  descriptor back at once, which is what the bound is for; an answer (a 429 or
  503) would need the request read first, or closing on its unread bytes resets
  the connection under the answer anyway. Such a caller already holds many
  connections, or the server is full: it sees the close and comes back later.
* EMFILE, ENFILE, ENOMEM or ENOBUFS at accept pause accepting for
  ``ACCEPT_PAUSE`` seconds (what is pending waits in the backlog) and are logged
  in one line at most once per ``error_log_window``, without a traceback.
* A connection whose client is gone (an answer could not be sent: reset, or closed
  with answers still owed) ends at once, with whatever it still had queued: hypercorn
  would go on answering its pipelined requests into the void, and hold the descriptor
  meanwhile (see :class:`ClientStream`).

::

    gate = ConnectionGate(total=18_000, per_address=2000)
    binds = await nursery.start(partial(serve_http, app, config, sockets, gate,
                                        shutdown_trigger=stop.wait))
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Awaitable, Callable
from functools import partial

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState, LifespanState
from hypercorn.utils import repr_socket_addr

from leasegate.http.server.limits import address_key
from leasegate.logs import Throttled

log = logging.getLogger("leasegate.http")

# accept(2)'s errors that say the process or the system is out of something
# (trio.serve_listeners' list): wait, then accept again.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_PAUSE = 0.1
# Descriptors kept for what is not a connection: the database's files, artifacts
# being written or read, logs; at least FD_RESERVE, and a tenth of the limit.
FD_RESERVE = 64


def connection_budget(fd_limit: int) -> int:
    """How many connections a process allowed ``fd_limit`` descriptors may hold open."""
    return max(fd_limit // 2, fd_limit - max(FD_RESERVE, fd_limit // 10))


class ConnectionGate:
    """Open connections, per client address and in all (``per_address`` 0: no bound
    per address), and what was refused or gone wrong at accept."""

    def __init__(self, total: int, per_address: int, error_log_window: float = 600.0) -> None:
        self.total = total
        self.per_address = per_address
        self.open = 0
        self._by_address: dict[str, int] = {}
        self.refused = {"address": 0, "total": 0}
        self._out_of_resources = Throttled(log, error_log_window)

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``; False (not counted) past a bound."""
        if self.open >= self.total:
            self.refused["total"] += 1
            return False
        held = self._by_address.get(address, 0)
        if self.per_address and held >= self.per_address:
            self.refused["address"] += 1
            return False
        self._by_address[address] = held + 1
        self.open += 1
        return True

    def release(self, address: str) -> None:
        held = self._by_address[address] - 1
        if held:
            self._by_address[address] = held
        else:
            del self._by_address[address]
        self.open -= 1

    def out_of_resources(self, exc: OSError) -> None:
        """accept(2) failed for want of descriptors or memory: one line, at most once
        per window (with how many times since), no traceback."""
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self._out_of_resources.warning(
            trio.current_time(), "accept failed: %s (%s) with %d connections open; "
            "accepting again in %g s", name, os.strerror(exc.errno or 0), self.open,
            ACCEPT_PAUSE)


async def serve_http(app: AppWrapper, config: Config, sockets: Sockets, gate: ConnectionGate,
                     *, shutdown_trigger: Callable[[], Awaitable[object]],
                     task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                     ) -> None:
    """hypercorn's trio worker (``hypercorn.trio.run.worker_serve``) for plain-HTTP
    ``sockets``, accepting through ``gate``; started with the binds, it serves until
    ``shutdown_trigger`` returns, then gives requests in flight
    ``config.graceful_timeout``."""
    config.set_statsd_logger_class(StatsdLogger)
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(app, config, lifespan_state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as connections:
            handler = partial(TCPServer, app, config, context,
                              ConnectionState(lifespan_state.copy()))
            task_status.started([f"http://{repr_socket_addr(s.family, s.getsockname())}"
                                 for s in sockets.insecure_sockets])
            try:
                async with trio.open_nursery() as accepting:
                    accepting.start_soon(_cancel_when, shutdown_trigger, accepting.cancel_scope)
                    for sock in sockets.insecure_sockets:
                        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                        accepting.start_soon(_accept, listener, gate, connections, handler)
            finally:
                await context.terminated.set()  # idle keep-alive connections close now
                connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


async def _cancel_when(trigger: Callable[[], Awaitable[object]],
                       scope: trio.CancelScope) -> None:
    await trigger()
    scope.cancel()


Handler = Callable[["ClientStream"], Awaitable[None]]


async def _accept(listener: trio.SocketListener, gate: ConnectionGate,
                  connections: trio.Nursery, handler: Handler) -> None:
    """Accept until cancelled, then close the listening socket (new connections are
    refused by the system from then on)."""
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in OUT_OF_RESOURCES:
                    raise
                gate.out_of_resources(exc)
                await trio.sleep(ACCEPT_PAUSE)
                continue
            try:
                address = address_key(stream.socket.getpeername()[0])
            except OSError:  # reset before we got to it
                address = None
            if address is None or not gate.admit(address):
                stream.socket.close()  # not a byte read: nothing more to free
                continue
            connections.start_soon(_serve, stream, address, gate, handler)


class ClientStream(trio.abc.HalfCloseableStream):
    """A client's connection as hypercorn's connection handler (``TCPServer``) sees it:
    trio's socket stream, except that a client found gone ends the connection at once
    (its reset, or its end of the stream, read), and for two failures of a send.

    * The client is gone (``BrokenResourceError``): hypercorn tells the request in
      flight, then starts the next request it had read ahead, answers it into the
      void, and so on through everything the client pipelined (20 connections of
      2,000 pipelined list reads, reset: 40 s of both cores). Here the send cancels
      ``connection``, the scope the whole connection runs in: no further request
      starts, and the descriptor is closed as the scope unwinds.
    * hypercorn is closing the connection (its close sends EOF outside its send lock,
      so an answer still being written meets it: ``BusyResourceError``, which no one
      up the stack expects, logged at ERROR as an error of the app): a send on a
      closing stream, ``ClosedResourceError``, which hypercorn takes as "gone"; and
      the EOF that meets an answer being written is left out (the close follows).
    """

    def __init__(self, stream: trio.SocketStream, connection: trio.CancelScope) -> None:
        self.stream = stream
        self.socket = stream.socket  # hypercorn reads the addresses from it
        self._connection = connection

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            await self.stream.send_all(data)
        except trio.BusyResourceError:
            raise trio.ClosedResourceError("the connection is being closed") from None
        except trio.BrokenResourceError:
            self._connection.cancel()
            raise

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        # The same clash the other way round: an answer is being written as hypercorn
        # closes. The close goes on without the EOF (aclose ends it all).
        with contextlib.suppress(trio.BusyResourceError):
            await self.stream.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            data = await self.stream.receive_some(max_bytes)
        except trio.BrokenResourceError:
            self._connection.cancel()
            raise
        if not data:
            # The client closed its side: hypercorn takes that as gone too (it tells
            # the request in flight), then keeps the socket until its keep-alive
            # timer fires (up to 20 s of a descriptor in CLOSE-WAIT).
            self._connection.cancel()
        return data

    async def aclose(self) -> None:
        await self.stream.aclose()


async def _serve(stream: trio.SocketStream, address: str, gate: ConnectionGate,
                 handler: Handler) -> None:
    try:
        with trio.CancelScope() as connection:
            await handler(ClientStream(stream, connection))
    finally:
        gate.release(address)
        await trio.aclose_forcefully(stream)

