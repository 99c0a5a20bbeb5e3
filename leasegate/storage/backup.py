"""Consistent online copies of the whole database (tasks and ledger together)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from leasegate.storage.connection import BUSY_TIMEOUT_MS
from leasegate.storage.durable_files import fsync_directory, make_dir_durably, replace_durably
from leasegate.storage.migrations import MIGRATIONS, current_version


class NotABackup(ValueError):
    """The file is not a leasegate database this version can use."""


def backup(db_file: Path, out: Path) -> int:
    """Copy ``db_file`` to ``out`` through SQLite's backup API; returns the size.

    Safe while a server writes: the copy is one consistent snapshot. The copy
    is written next to ``out``, fsynced and renamed, and the rename fsynced: ``out``
    is never half-written, and once this returns a power cut cannot take it back.
    On failure the partial copy is removed.
    """
    make_dir_durably(out.parent)
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    # A plain connection: connect() would switch a backup file being restored
    # to WAL mode, i.e. change the user's file.
    try:
        source = sqlite3.connect(str(db_file))
        source.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        try:
            target = sqlite3.connect(str(partial))
            try:
                source.backup(target)
                target.execute("PRAGMA journal_mode = DELETE")
            finally:
                target.close()
        finally:
            source.close()
        replace_durably(partial, out)
    except BaseException:
        # A full disk must not also keep the half copy that filled it.
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise
    return out.stat().st_size


def check_backup(path: Path) -> None:
    if not path.exists():
        raise NotABackup(f"{path}: no such file")
    if not path.is_file():
        raise NotABackup(f"{path}: not a file")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
            version = current_version(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise NotABackup(f"{path}: not an SQLite database ({exc})") from None
    if ok != "ok":
        raise NotABackup(f"{path}: integrity check failed: {ok}")
    if not 1 <= version <= MIGRATIONS[-1][0]:
        raise NotABackup(f"{path}: not a leasegate database (schema version {version})")


def restore(backup_file: Path, db_file: Path) -> int:
    """Replace ``db_file`` with a checked copy of ``backup_file`` (server stopped)."""
    check_backup(backup_file)
    make_dir_durably(db_file.parent)
    for suffix in ("-wal", "-shm"):
        Path(str(db_file) + suffix).unlink(missing_ok=True)
    # The old WAL must be gone for good before the new file takes its database's
    # name: replayed onto the restored file after a power cut, it would corrupt it.
    fsync_directory(db_file.parent)
    return backup(backup_file, db_file)
