"""A real ``leasegate serve`` in a subprocess, for end-to-end tests (wall clock)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

ROLES = ("admin", "worker", "client")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    keys: dict[str, str]
    data: Path
    env: dict[str, str] = field(default_factory=dict)
    # The server's output after start-up, when ``start(..., collect_output=True)``.
    output: list[str] = field(default_factory=list)
    # Its output up to and including the "serving" line.
    startup: list[str] = field(default_factory=list)
    log_level: str = "WARNING"

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def client(self, role: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10,
                            headers={"Authorization": f"Bearer {self.keys[role]}"})


# A short drain, so that stopping a served process costs the suite little time.
TEST_ENV = {"LEASEGATE_DRAIN_SECONDS": "0.2"}


def start(data: Path, env: dict[str, str] | None = None, *, port: int | None = None,
          keys: dict[str, str] | None = None, collect_output: bool = False,
          log_level: str = "WARNING", extra_args: tuple[str, ...] = ()) -> Served:
    """Serve ``data`` on ``port`` (default: a free one), with ``extra_args`` for
    ``serve``; ``env`` adds to (and overrides)
    ``TEST_ENV``. ``keys`` are those of an earlier start on ``data`` (bootstrap keys are
    printed on a fresh directory only). ``collect_output`` keeps reading the server's
    output into ``Served.output`` so that a chatty server never blocks on a full pipe."""
    port = port or free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "leasegate.cli", "serve", "--data", str(data),
         "--port", str(port), "--log-level", log_level, *extra_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **TEST_ENV, **(env or {})},
    )
    try:
        keys, seen = _wait_ready(process, dict(keys or {}))
    except BaseException:
        # A server that never said it serves is killed here: no test would stop it, and
        # on a loaded machine the ones left running made the next starts slower still.
        process.kill()
        process.wait()
        raise
    served = Served(process, f"http://127.0.0.1:{port}", keys, data, dict(env or {}),
                    log_level=log_level, startup=seen)
    if collect_output:
        threading.Thread(target=_collect, args=(process.stdout, served.output),
                         daemon=True).start()
    return served


def _wait_ready(process: subprocess.Popen[str],
                keys: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Read the server's output until it serves; the keys it printed and what it said."""
    assert process.stdout is not None
    deadline = time.monotonic() + 60  # generous: a shared machine's load varies tenfold
    seen: list[str] = []
    for line in process.stdout:
        seen.append(line)
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ROLES and parts[1].startswith("lg_"):
            keys[parts[0]] = parts[1]
        if "serving http://" in line:
            return keys, seen
        assert time.monotonic() < deadline, "server did not start"
    raise AssertionError(f"server exited: {process.wait()}\n{''.join(seen[-20:])}")


def _collect(stream: IO[str], into: list[str]) -> None:
    for line in stream:
        into.append(line)


def restart(served: Served) -> Served:
    """Serve the same data directory again, on the same port, with the same keys and
    environment (after ``stop``, or after ``served.process.kill()``: a crash)."""
    if served.process.poll() is None:
        served.process.wait(timeout=15)
    return start(served.data, served.env, port=served.port, keys=served.keys,
                 collect_output=True, log_level=served.log_level)


def stop(served: Served) -> int:
    served.process.send_signal(signal.SIGTERM)
    try:
        return served.process.wait(timeout=15)
    finally:
        if served.process.poll() is None:
            served.process.kill()
