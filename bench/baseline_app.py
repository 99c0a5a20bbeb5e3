"""The bare route the benches measure leasegate beside (``bench/lifecycle.py``,
``bench/route_cost.py``, ``bench/stages.py``): a bare Quart-Trio route, served like leasegate.

``POST /v1/queries`` answers 201 with a constant JSON body and does nothing
else: no auth, no validation, no actor, no SQLite. It runs under hypercorn's
trio worker with leasegate's own hypercorn config
(:func:`leasegate.server.hypercorn_config`), so the difference between the two
targets is leasegate's work per request. Prints ``serving http://...`` when ready::

    python bench/baseline_app.py --port 8471
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from functools import partial
from typing import Any

import trio
from hypercorn.trio import serve as hypercorn_serve
from quart import request
from quart_trio import QuartTrio

from leasegate.server import hypercorn_config
from leasegate.settings import load

REPLY: dict[str, Any] = {"query_id": "q-baseline", "status": "queued", "created": True}


def create_app() -> QuartTrio:
    app = QuartTrio("leasegate-baseline")

    @app.post("/v1/queries")
    async def submit() -> tuple[dict[str, Any], int]:
        await request.get_data()  # see the module docstring
        return REPLY, 201

    return app


async def _serve(host: str, port: int) -> None:
    config = hypercorn_config(load(), host, port)
    shutdown = trio.Event()

    async def watch_signals() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                shutdown.set()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_signals)
        await nursery.start(partial(hypercorn_serve, create_app(), config,
                                    shutdown_trigger=shutdown.wait))
        print(f"baseline serving http://{host}:{port}", flush=True)  # bound and listening


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    trio.run(_serve, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
