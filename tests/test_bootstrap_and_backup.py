"""Bootstrap keys are printed once per data directory; backups never alter their source."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import trio

from leasegate.actors.keys.records import RevokeKey
from leasegate.clock import Clock
from leasegate.server import bootstrap_keys
from leasegate.settings import Settings
from leasegate.storage.backup import backup, restore
from leasegate.system import new_system


async def test_bootstrap_prints_keys_only_on_a_fresh_database(
        tmp_path: Path, settings: Settings, clock: Clock) -> None:
    db_file = tmp_path / "leasegate.db"
    system = new_system(db_file, settings, clock=clock, inline_storage=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(system.run)
        first = io.StringIO()
        await bootstrap_keys(system, first)
        keys = [line.split()[1] for line in first.getvalue().splitlines()[1:]]
        assert len(keys) == 3 and all(k.startswith("lg_") for k in keys)
        again = io.StringIO()
        await bootstrap_keys(system, again)
        assert again.getvalue() == ""
        for key in keys:  # revoke everything, as after a leak
            await system.keys.ask(RevokeKey(key.split("_")[1]))
        after_revoking = io.StringIO()
        await bootstrap_keys(system, after_revoking)
        assert after_revoking.getvalue() == ""  # no fresh admin key in the logs
        system.close()


def test_restore_leaves_the_backup_file_as_it_was(tmp_path: Path) -> None:
    source = tmp_path / "live.db"
    conn = sqlite3.connect(source)
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    copy = tmp_path / "copy.db"
    backup(source, copy)
    before = copy.read_bytes()
    restore(copy, tmp_path / "restored" / "leasegate.db")
    assert copy.read_bytes() == before
    mode = sqlite3.connect(copy).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "delete"
