"""The command line on PostgreSQL: ``serve --database``, ``keys create --database`` (or
LEASEGATE_DATABASE_URL), and backup and restore refusing in favour of pg_dump and
pg_restore."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from leasegate.cli import main
from tests import served
from tests.postgres import Server


def test_keys_create_on_a_postgresql_database_and_the_gateway_serving_it(
        postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gateway = served.start(tmp_path / "var", extra_args=("--database", postgres_url))
    try:
        assert main(["keys", "create", "--role", "client", "--name", "c", "--tenant", "acme",
                     "--database", postgres_url, "--data", str(tmp_path / "elsewhere")]) == 0
        key = capsys.readouterr().out.splitlines()[-1]
        assert not (tmp_path / "elsewhere").exists()  # nothing of SQLite's was made
        url = f"http://127.0.0.1:{gateway.port}"
        reply = httpx.post(f"{url}/v1/tasks", headers={"Authorization": f"Bearer {key}"},
                           json={"task_id": "t1", "site": "shop", "kind": "k"})
        assert reply.status_code == 201, reply.text
        reply = httpx.post(f"{url}/v1/tasks", headers={"Authorization": f"Bearer {key}"},
                           json={"task_id": "t\u0000", "site": "shop", "kind": "k"})
        assert reply.status_code == 400
        admin = {"Authorization": f"Bearer {gateway.keys['admin']}"}
        reply = httpx.post(f"{url}/v1/admin/backup", headers=admin)
        assert reply.status_code == 409
        assert "pg_dump" in reply.json()["error"]["message"]
        health = httpx.get(f"{url}/health", headers=admin).json()
        assert health["details"]["gateway"].endswith(f":{gateway.port}")
        assert not (tmp_path / "var" / "leasegate.db").exists()
    finally:
        served.stop(gateway)


def test_backup_and_restore_name_pg_dump_and_pg_restore(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://nobody@127.0.0.1:1/none"  # never connected to
    assert main(["backup", "--out", str(tmp_path / "copy"), "--database", url]) == 1
    err = capsys.readouterr().err
    assert "pg_dump" in err and err.count("\n") == 1
    monkeypatch.setenv("LEASEGATE_DATABASE_URL", url)
    assert main(["restore", str(tmp_path / "copy")]) == 1
    assert "pg_restore" in capsys.readouterr().err
    assert not (tmp_path / "copy").exists()


def test_a_database_url_that_is_not_postgresql_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["keys", "create", "--role", "admin", "--name", "a",
                   "--database", "mysql://root@host/db", "--data", str(tmp_path)])
    assert status == 2
    assert "postgresql://" in capsys.readouterr().err


def test_an_unreachable_database_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["keys", "create", "--role", "admin", "--name", "a",
                   "--database", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"])
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith("leasegate: database: cannot connect to PostgreSQL") and (
        err.count("\n") == 1)


def test_serve_waits_for_an_unreachable_database_then_stops_with_one_line(
        tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "leasegate.cli", "serve", "--data", str(tmp_path / "var"),
         "--port", str(served.free_port()),
         "--database", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "LEASEGATE_DATABASE_CONNECT_TIMEOUT": "1.2"})
    assert done.returncode == 1
    *tries, last = done.stderr.splitlines()
    # A line a failed try but the last (tries at 0, 0.5 and 1.2 s: a doubling pause cut
    # to the deadline; fewer on a loaded machine), then the reason.
    assert 1 <= len(tries) <= 2, done.stderr
    assert all("PostgreSQL not reachable yet (try" in line for line in tries)
    assert last.startswith("leasegate: cannot connect to PostgreSQL (waited 1.2 s, "
                           "database_connect_timeout)"), done.stderr
    assert "Traceback" not in done.stderr


def test_serve_started_before_its_database_serves_once_it_appears(
        tmp_path: Path, postgres_server: Server) -> None:
    """The gateway is started first (as docker-compose or systemd often do): it waits,
    a log line a try, and serves as soon as the database accepts connections."""
    name = f"leasegate_test_late_{secrets.token_hex(6)}"
    url = urlunsplit(urlsplit(postgres_server.url)._replace(path=f"/{name}"))

    def create_later() -> None:
        # A served process's start: the wall clock is its time. Later than the gateway's
        # first try even on a loaded machine (its start-up alone took over a second).
        time.sleep(5.0)
        with psycopg.connect(make_conninfo(postgres_server.url, dbname="postgres"),
                             autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')

    creating = threading.Thread(target=create_later)
    creating.start()
    try:
        gateway = served.start(tmp_path / "var", {"LEASEGATE_DATABASE_URL": url},
                               log_level="INFO")
        try:
            assert any("PostgreSQL not reachable yet (try 1)" in line
                       for line in gateway.startup), gateway.startup
            assert httpx.get(f"{gateway.url}/health").status_code == 200
        finally:
            served.stop(gateway)
    finally:
        creating.join()
        postgres_server.drop_database(url)
