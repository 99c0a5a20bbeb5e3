"""Durable before acknowledged: `serve` refuses storage that cannot keep it, unless the
operator says so; then every start says so, and so do /health and /metrics."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.served import Served, start, stop


def durable_gauge(served: Served) -> str:
    with served.client("admin") as admin:
        metrics = admin.get("/metrics").text
    [line] = [m for m in metrics.splitlines() if m.startswith("leasegate_durable ")]
    return line.split()[1]


@pytest.mark.parametrize("mode", ["OFF", "NORMAL"])
def test_serve_refuses_storage_that_is_not_durable(tmp_path: Path, mode: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "leasegate.cli", "serve", "--data", str(tmp_path / "var"),
         "--port", "0"], capture_output=True, text=True, timeout=30,  # 0: never taken
        env={**os.environ, "LEASEGATE_SQLITE_SYNCHRONOUS": mode})
    assert run.returncode == 1
    assert f"sqlite_synchronous = {mode}" in run.stderr and "--unsafe-durability" in run.stderr
    # Refused before anything was written: no keys, not even the schema.
    assert "lg_" not in run.stdout
    conn = sqlite3.connect(tmp_path / "var" / "leasegate.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    conn.close()


def test_unsafe_durability_serves_and_says_so(tmp_path: Path) -> None:
    served = start(tmp_path / "var", {"LEASEGATE_SQLITE_SYNCHRONOUS": "OFF"},
                   extra_args=("--unsafe-durability",))
    try:
        [warning] = [line for line in served.startup if "NOT DURABLE" in line]
        assert " WARNING " in warning and "sqlite_synchronous = OFF" in warning
        health = httpx.get(f"{served.url}/health", timeout=10).json()
        assert health["checks"]["durable"] is False
        assert health["status"] == "ok"  # the operator's standing choice, not a fault
        with served.client("admin") as admin:
            details = admin.get("/health").json()["details"]
        assert details["durability_weakened_by"] == [
            "sqlite_synchronous = OFF (FULL or EXTRA keeps the promise)"]
        assert durable_gauge(served) == "0.0"
    finally:
        stop(served)


def test_a_config_file_may_allow_it_too(tmp_path: Path) -> None:
    config = tmp_path / "leasegate.toml"
    config.write_text('sqlite_synchronous = "NORMAL"\nunsafe_durability = true\n')
    served = start(tmp_path / "var", extra_args=("--config", str(config)))
    try:
        assert sum("NOT DURABLE" in line for line in served.startup) == 1
        assert httpx.get(f"{served.url}/health", timeout=10).json()["checks"]["durable"] is False
    finally:
        stop(served)
    again = start(served.data, keys=served.keys, extra_args=("--config", str(config)))
    try:  # every start says it, not only the first
        assert sum("NOT DURABLE" in line for line in again.startup) == 1
    finally:
        stop(again)


def test_the_default_is_durable(served: Served) -> None:
    assert not any("NOT DURABLE" in line for line in served.startup)
    assert httpx.get(f"{served.url}/health", timeout=10).json()["checks"]["durable"] is True
    assert durable_gauge(served) == "1.0"
