"""``leasegate serve``: the actors and hypercorn side by side in one nursery.

Shutdown on SIGINT/SIGTERM works in this order: tell the actors to drain
(waiting long-polls answer with an empty list) and answer every request that
arrives with 503 (5030, ``Retry-After``, ``Connection: close``) for
``drain_seconds``, still accepting connections, so that no client meets a
refused or dropped connection while it may still be answered; then stop
hypercorn (requests in flight get ``GRACE_SECONDS``), then close the actors'
inboxes so each finishes what it holds (at most ``ACTORS_CLOSE_SECONDS``). A
second signal stops at once: :class:`Interrupted` ends the nursery.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import logging
import math
import resource
import signal
import socket
import sys
from pathlib import Path
from typing import TextIO

import trio
from hypercorn.config import Config, Sockets
from hypercorn.utils import wrap_app

from leasegate.actors.keys.records import CreateFirstKeys, CreateKey
from leasegate.http.app import create_app
from leasegate.http.server import expect
from leasegate.http.server.listener import ConnectionGate, connection_budget, serve_http
from leasegate.settings import Settings
from leasegate.storage.datadir import DataDirLock, DataDirUnusable, db_path
from leasegate.storage.durable_files import make_dir_durably
from leasegate.system import System, new_system

log = logging.getLogger("leasegate.server")

BOOTSTRAP_TENANT = "default"
GRACE_SECONDS = 5.0
ACTORS_CLOSE_SECONDS = 10.0
# The open-file limit to take when the hard limit is unlimited (Linux's nr_open default).
FD_LIMIT_WHEN_UNLIMITED = 1 << 20


class StartupError(RuntimeError):
    """Serving could not start (e.g. the port is taken); the message is one line."""


class Interrupted(BaseException):
    """A second SIGINT/SIGTERM during shutdown: stop at once. A BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def hypercorn_config(settings: Settings, host: str, port: int) -> Config:
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    # Slowloris guards. read_timeout (hypercorn's default: none) bounds every
    # wait for bytes, even while a request is in flight, hence the setting
    # must exceed max_wait_seconds. keep_alive_timeout bounds a socket with no
    # complete request (idle, or trickling its headers): hypercorn closes such
    # a socket only when that timer fires.
    config.read_timeout = math.ceil(settings.http_read_timeout)
    config.keep_alive_timeout = min(20.0, settings.http_read_timeout)
    config.graceful_timeout = GRACE_SECONDS
    config.backlog = 1024  # a thousand workers reconnecting after a restart
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def listen(config: Config, host: str, port: int) -> Sockets:
    """Bind and listen before anything else starts, so a taken port is one clear
    error (hypercorn would bind inside its nursery: an exception group)."""
    try:
        sockets = config.create_sockets()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"port {port} is in use") from None
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
    return sockets


async def bootstrap_keys(system: System, out: TextIO) -> None:
    """On a fresh database, create and print one key per role, once.

    Fresh means no key was ever created: revoking every key after a leak and
    restarting must not print a new admin key into the logs.
    """
    # One message: of several gateways starting together on a fresh PostgreSQL
    # database, the one whose turn comes first creates them, the others none.
    created = await system.keys.ask(CreateFirstKeys((
        CreateKey("admin", "bootstrap admin"), CreateKey("worker", "bootstrap worker"),
        CreateKey("client", "bootstrap client", BOOTSTRAP_TENANT))))
    if not created:
        return
    print("Bootstrap keys (shown once; only their hashes are stored):", file=out)
    for made in created:
        suffix = f" (tenant {made.tenant})" if made.tenant else ""
        print(f"  {made.role:<6} {made.key}{suffix}", file=out)
    out.flush()


async def _watch_signals(system: System, drain_seconds: float,
                         stop_http: trio.Event) -> None:
    """The first signal starts the drain and, ``drain_seconds`` later, stops
    hypercorn; a second one raises :class:`Interrupted`."""
    draining = False
    async with trio.open_nursery() as timer:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if draining:
                    raise Interrupted(signum)
                draining = True
                log.info("received %s: draining for %gs", signal.Signals(signum).name,
                         drain_seconds)
                system.drain()
                timer.start_soon(_stop_after, drain_seconds, stop_http)


async def _stop_after(seconds: float, stop_http: trio.Event) -> None:
    await trio.sleep(seconds)
    stop_http.set()


def raise_fd_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (every
    connection is a descriptor); returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    want = FD_LIMIT_WHEN_UNLIMITED if hard == unlimited else hard
    if soft != unlimited and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError) as exc:  # e.g. above the kernel's nr_open
            log.warning("could not raise the open-file limit from %d to %d: %s",
                        soft, want, exc)
    return want if soft == unlimited else soft


def connection_gate(settings: Settings) -> ConnectionGate:
    """The bounds on open connections: ``max_connections`` (0: what the open-file
    limit allows, less a reserve) and ``max_connections_per_address``."""
    budget = connection_budget(raise_fd_limit())
    total = settings.max_connections or budget
    if total > budget:
        log.warning("max_connections %d is more than the open-file limit allows (%d with "
                    "a reserve for the database, artifacts and logs): past that, accepts "
                    "pause", total, budget)
    return ConnectionGate(total, settings.max_connections_per_address,
                          settings.error_log_window)


def tune_gc() -> None:
    """Once started: what exists now (modules, the app, the actors) lives as long as the
    process, so the collector stops walking it (``gc.freeze``), and the young
    generation is collected every 10,000 allocations instead of 700 (a request makes
    hundreds). bench/lifecycle, queries: 6.42 -> 6.12 ms of server CPU per job
    unbatched, 0.72 -> 0.67 batched."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def data_dir_held(data_dir: Path, settings: Settings) -> contextlib.AbstractContextManager[object]:
    """SQLite: the data directory's lock (one server per database file). PostgreSQL:
    the directory made if missing and nothing held, since every gateway of the database
    may share it (artifacts); the database itself arbitrates between them."""
    if settings.database_url is None:
        return DataDirLock(data_dir)
    try:
        make_dir_durably(data_dir)
    except OSError as exc:
        raise DataDirUnusable(f"cannot use data directory {data_dir}: "
                              f"{exc.strerror or exc}") from None
    return contextlib.nullcontext()


def where(data_dir: Path, settings: Settings) -> str:
    """What the serving line says of the storage (never the URL: it may hold a password)."""
    if settings.database_url is None:
        return f"data: {data_dir}"
    return f"PostgreSQL, gateway {settings.gateway}, data: {data_dir}"


async def serve(data_dir: Path, settings: Settings, host: str = "127.0.0.1", port: int = 8470,
                *, bootstrap: bool = True, out: TextIO = sys.stdout,
                allow_unbalanced: bool = False) -> None:
    """Serve until SIGINT/SIGTERM, on the SQLite file in ``data_dir`` or the PostgreSQL
    database of ``settings.database_url``. Raises DataDirBusy if another server holds ``data_dir``,
    DataDirUnusable if it cannot be written, StartupError if the port is taken."""
    if settings.gateway is None:
        settings = settings.replace(gateway=f"{socket.gethostname()}:{port}")
    if settings.database_url is not None:
        from leasegate.storage.postgres.database import wait_until_reachable

        await wait_until_reachable(settings.database_url, settings.database_connect_timeout)
    with data_dir_held(data_dir, settings):
        config = hypercorn_config(settings, host, port)
        expect.install(settings)  # no 100 Continue for a body that will be refused
        sockets = listen(config, host, port)
        try:
            system = new_system(db_path(data_dir), settings, allow_unbalanced=allow_unbalanced)
            gate = connection_gate(settings)
            quart_app = create_app(system)
            quart_app.extensions["leasegate.connections"] = gate  # for /metrics
            app = wrap_app(quart_app, config.wsgi_max_body_size, "asgi")
            async with trio.open_nursery() as watching:
                stop_http = trio.Event()
                watching.start_soon(_watch_signals, system, settings.drain_seconds, stop_http)
                async with trio.open_nursery() as nursery:
                    await nursery.start(system.run)
                    if bootstrap:
                        await bootstrap_keys(system, out)
                    tune_gc()
                    async with trio.open_nursery() as http:
                        binds = await http.start(functools.partial(
                            serve_http, app, config, sockets, gate,
                            shutdown_trigger=stop_http.wait))
                        print(f"leasegate serving {', '.join(binds)} ({where(data_dir, settings)})",
                              file=out, flush=True)
                    system.close()
                    # The actors finish what is in their inboxes; a stuck one must not
                    # hold exit.
                    nursery.cancel_scope.deadline = trio.current_time() + ACTORS_CLOSE_SECONDS
                watching.cancel_scope.cancel()  # a signal from now on is trio's KeyboardInterrupt
        finally:
            for sock in sockets.insecure_sockets:
                sock.close()
        log.info("stopped")
