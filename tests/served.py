"""A real ``leasegate serve`` in a subprocess, for end-to-end tests (wall clock)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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

    def client(self, role: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10,
                            headers={"Authorization": f"Bearer {self.keys[role]}"})


# A short drain, so that stopping a served process costs the suite little time.
TEST_ENV = {"LEASEGATE_DRAIN_SECONDS": "0.2"}


def start(data: Path, env: dict[str, str] | None = None) -> Served:
    """Serve ``data`` on a free port; ``env`` adds to (and overrides) ``TEST_ENV``."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "leasegate.cli", "serve", "--data", str(data),
         "--port", str(port), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **TEST_ENV, **(env or {})},
    )
    keys: dict[str, str] = {}
    assert process.stdout is not None
    deadline = time.monotonic() + 20
    for line in process.stdout:
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ROLES and parts[1].startswith("lg_"):
            keys[parts[0]] = parts[1]
        if "serving http://" in line:
            break
        assert time.monotonic() < deadline, "server did not start"
    else:
        raise AssertionError(f"server exited: {process.wait()}")
    return Served(process, f"http://127.0.0.1:{port}", keys, data)


def stop(served: Served) -> int:
    served.process.send_signal(signal.SIGTERM)
    try:
        return served.process.wait(timeout=15)
    finally:
        if served.process.poll() is None:
            served.process.kill()
