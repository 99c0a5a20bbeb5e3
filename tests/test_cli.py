"""The ``leasegate`` command as a user meets it: help, refusals, start-up failures.

Each refusal is one line on stderr and a documented exit status (1: could not
be done, 2: usage error); start-up failures run a real process.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from leasegate.cli import main
from leasegate.storage.connection import connect
from leasegate.storage.datadir import db_path
from leasegate.storage.migrations import migrate


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leasegate.cli", *args],
                          capture_output=True, text=True, timeout=30)


def make_database(data: Path) -> None:
    data.mkdir(parents=True)
    conn = connect(db_path(data))
    migrate(conn)
    conn.close()


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":class:" not in out
    assert "serve" in out and "Exit status" in out


def test_every_serve_option_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    # Each option's entry: its line and the deeper-indented lines after it. argparse puts
    # the help two spaces after the option, or on the next line when it is long.
    entries: list[str] = []
    for line in out.split("options:\n", 1)[1].splitlines():
        if line.startswith("  -"):
            entries.append(line)
        elif entries and line.startswith("   "):
            entries[-1] += "\n" + line
    assert len(entries) == 10
    for entry in entries:
        assert "\n" in entry or re.search(r"\S {2,}\S", entry), f"no help: {entry!r}"
    for shown in ("--data", "(default: var)", "(default: 127.0.0.1)", "(default: 8470)",
                  "--config", "--no-bootstrap-keys", "(default: INFO)", "--allow-unbalanced",
                  "--unsafe-durability"):
        assert shown in out


def test_keys_create_without_a_database_refuses_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = tmp_path / "not-the-data"
    status = main(["keys", "create", "--role", "worker", "--name", "w", "--data", str(wrong)])
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith(f"leasegate: no database in {wrong}") and err.count("\n") == 1
    assert "leasegate serve --data" in err
    assert not wrong.exists()


def test_keys_create_on_a_database_prints_the_key_last(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_database(tmp_path / "var")
    assert main(["keys", "create", "--role", "worker", "--name", "w", "--sites", "shop",
                 "--data", str(tmp_path / "var")]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("lg_")


def test_client_key_with_sites_is_refused(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    make_database(tmp_path / "var")
    status = main(["keys", "create", "--role", "client", "--name", "c", "--tenant", "acme",
                   "--sites", "shop", "--data", str(tmp_path / "var")])
    assert status == 2
    assert capsys.readouterr().err == "leasegate: invalid key: sites are for worker keys\n"


@pytest.mark.parametrize(("options", "refusal"), [
    (["--role", "worker", "--sites", ", ,"], "sites ', ,' names no site"),
    (["--role", "worker", "--sites", ""], "sites '' names no site"),
    (["--role", "client", "--tenant", "@world"], "tenant '@world' names a system account"),
    (["--role", "worker", "--tenant", "@holds"], "tenant '@holds' names a system account"),
])
def test_keys_create_refuses_what_the_api_refuses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str],
        refusal: str) -> None:
    """No key that leases nothing (the API refuses ``sites: []``), none for a system
    account of the ledger; nothing is created."""
    data = str(tmp_path / "var")
    make_database(tmp_path / "var")
    assert main(["keys", "create", "--name", "k", *options, "--data", data]) == 2
    assert capsys.readouterr().err.startswith(f"leasegate: invalid key: {refusal}")
    assert main(["keys", "list", "--json", "--data", data]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 0
    # Blanks between commas are only typing: the sites named are kept.
    assert main(["keys", "create", "--name", "k", "--role", "worker", "--sites", " shop, ,b2 ",
                 "--data", data]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--json", "--data", data]) == 0
    assert json.loads(capsys.readouterr().out)["items"][0]["sites"] == ["shop", "b2"]


def test_backup_without_a_database_refuses(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["backup", "--out", str(tmp_path / "copy.db"), "--data", str(tmp_path / "x")])
    assert status == 1
    assert capsys.readouterr().err.startswith(f"leasegate: no database in {tmp_path / 'x'}")
    assert not (tmp_path / "copy.db").exists()


def test_restore_of_a_missing_file_says_so(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.db"
    assert main(["restore", str(missing), "--data", str(tmp_path / "var")]) == 1
    assert capsys.readouterr().err == f"leasegate: {missing}: no such file\n"


def test_busy_port_is_one_line_and_status_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = run_cli("serve", "--data", str(tmp_path / "var"), "--port", str(port))
    assert run.returncode == 1
    assert run.stderr == f"leasegate: port {port} is in use\n"


def test_unusable_data_directory_is_one_line_and_status_1(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    run = run_cli("serve", "--data", str(tmp_path / "a-file" / "var"))
    assert run.returncode == 1
    assert run.stderr == f"leasegate: cannot use data directory {tmp_path}/a-file/var: " \
                         "Not a directory\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_data_directory_is_one_line_and_status_1(tmp_path: Path) -> None:
    data = tmp_path / "var"
    data.mkdir(mode=0o500)
    run = run_cli("serve", "--data", str(data))
    assert run.returncode == 1
    assert run.stderr == f"leasegate: cannot use data directory {data}: Permission denied\n"


def test_a_failure_outside_message_handling_stops_serve_with_status_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite3

    import trio

    import leasegate.server

    async def database_gone(*args: object, **kwargs: object) -> None:
        async def actor() -> None:
            raise sqlite3.DatabaseError("database disk image is malformed")

        async with trio.open_nursery() as nursery:  # as the actors run: in nurseries
            nursery.start_soon(actor)

    monkeypatch.setattr(leasegate.server, "serve", database_gone)
    assert main(["serve", "--data", "unused", "--log-level", "ERROR"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "leasegate: stopped: DatabaseError: database disk image is malformed"


def test_serve_refuses_unbalanced_books_unless_allowed(tmp_path: Path) -> None:
    import sqlite3

    from tests import served

    data = tmp_path / "var"
    gateway = served.start(data)
    assert served.stop(gateway) == 0
    with sqlite3.connect(db_path(data)) as conn:  # someone edited the books by hand
        conn.execute("INSERT INTO ledger_accounts (account, balance, held, created_at) "
                     "VALUES ('t1', 5, 0, 0)")
    run = run_cli("serve", "--data", str(data), "--port", str(served.free_port()))
    assert run.returncode == 1
    [line] = run.stderr.splitlines()
    assert line.startswith("leasegate: ") and "balances_sum_to_zero" in line, line
    again = served.start(data, keys=gateway.keys, extra_args=("--allow-unbalanced",))
    try:
        health = again.client("admin").get("/health").json()
        assert (health["status"], health["checks"]["ledger_ok"]) == ("degraded", False)
    finally:
        assert served.stop(again) == 0
