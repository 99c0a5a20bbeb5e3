"""``leasegate serve``: the actors and hypercorn side by side in one nursery.

Shutdown on SIGINT/SIGTERM works in this order: tell the actors to drain
(parked long-polls answer with an empty list, new ones are refused), stop
hypercorn, then close the actors' inboxes so each finishes what it holds.
"""

from __future__ import annotations

import functools
import logging
import math
import signal
import sys
from pathlib import Path
from typing import TextIO

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from leasegate.actors.key_messages import CountKeys, CreateKey, Role
from leasegate.actors.system import System, new_system
from leasegate.http import expect
from leasegate.http.app import create_app
from leasegate.settings import Settings
from leasegate.storage.datadir import DataDirLock, db_path

log = logging.getLogger("leasegate.server")

BOOTSTRAP_TENANT = "default"


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
    config.graceful_timeout = 5.0
    config.backlog = 1024  # a thousand workers reconnecting after a restart
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


async def bootstrap_keys(system: System, out: TextIO) -> None:
    """On a fresh database, create and print one key per role, once.

    Fresh means no key was ever created: revoking every key after a leak and
    restarting must not print a new admin key into the logs.
    """
    if await system.keys.mailbox.ask(CountKeys()):
        return
    print("Bootstrap keys (shown once; only their hashes are stored):", file=out)
    keys: tuple[tuple[Role, str, str | None], ...] = (
        ("admin", "bootstrap admin", None), ("worker", "bootstrap worker", None),
        ("client", "bootstrap client", BOOTSTRAP_TENANT))
    for role, name, tenant in keys:
        created = await system.keys.mailbox.ask(CreateKey(role, name, tenant))
        suffix = f" (tenant {tenant})" if tenant else ""
        print(f"  {role:<6} {created.key}{suffix}", file=out)
    out.flush()


async def _watch_signals(system: System, shutdown: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: draining", signal.Signals(signum).name)
            system.drain()
            shutdown.set()
            return


async def serve(data_dir: Path, settings: Settings, host: str = "127.0.0.1", port: int = 8470,
                *, bootstrap: bool = True, out: TextIO = sys.stdout) -> None:
    """Serve until SIGINT/SIGTERM. Raises DataDirBusy if another server holds ``data_dir``."""
    with DataDirLock(data_dir):
        system = new_system(db_path(data_dir), settings)
        app = create_app(system)
        config = hypercorn_config(settings, host, port)
        expect.install(settings)  # no 100 Continue for a body that will be refused
        async with trio.open_nursery() as nursery:
            await nursery.start(system.run)
            if bootstrap:
                await bootstrap_keys(system, out)
            shutdown = trio.Event()
            nursery.start_soon(_watch_signals, system, shutdown)
            async with trio.open_nursery() as http:
                # Ready only once hypercorn has bound the socket.
                binds = await http.start(functools.partial(
                    hypercorn_serve, app, config, shutdown_trigger=shutdown.wait))
                print(f"leasegate serving {', '.join(binds)} (data: {data_dir})", file=out,
                      flush=True)
            system.close()
            # The actors finish what is in their inboxes; a stuck one must not hold exit.
            nursery.cancel_scope.deadline = trio.current_time() + 10
        log.info("stopped")
