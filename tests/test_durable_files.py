"""Every name a committed row, a backup or a data directory relies on is fsynced into
its directory after it is made (and a renamed file's bytes before the rename): checked
by recording the file-system calls in order."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from leasegate.cli import main
from leasegate.storage.datadir import DataDirLock
from tests.conftest import Gateway, open_db
from tests.test_artifacts import leased_task, upload


class Disk:
    """Records, in order, the file-system calls that make or sync a name: ``made``
    (mkdir, a create through os.open), ``renamed`` (the target of a rename), ``gone``
    (unlink), ``fsync_dir`` and ``fsync_file`` (by the inode the descriptor points at)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, Any]] = []
        real_fsync, real_mkdir, real_open = os.fsync, os.mkdir, os.open
        real_replace, real_unlink = os.replace, os.unlink

        def fsync(fd: int) -> None:
            st = os.fstat(fd)
            kind = "fsync_dir" if stat.S_ISDIR(st.st_mode) else "fsync_file"
            self.events.append((kind, (st.st_dev, st.st_ino)))
            real_fsync(fd)

        def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
            real_mkdir(path, *args, **kwargs)
            self.events.append(("made", os.path.abspath(path)))

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            existed = os.path.exists(path)
            fd = real_open(path, flags, *args, **kwargs)
            if flags & os.O_CREAT and not existed:
                self.events.append(("made", os.path.abspath(path)))
            return fd

        def replace(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
            real_replace(source, target, *args, **kwargs)
            self.events.append(("renamed", os.path.abspath(target)))

        def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
            real_unlink(path, *args, **kwargs)
            self.events.append(("gone", os.path.abspath(path)))

        for name, fake in (("fsync", fsync), ("mkdir", mkdir), ("open", open_),
                           ("replace", replace), ("unlink", unlink)):
            monkeypatch.setattr(os, name, fake)

    def index(self, kinds: tuple[str, ...], path: Path) -> int:
        """Where ``path`` was last made, renamed or removed (``kinds``)."""
        hits = [i for i, (k, p) in enumerate(self.events) if k in kinds and p == str(path)]
        assert hits, f"{path}: no {'/'.join(kinds)} here"
        return hits[-1]

    def synced_after(self, kinds: tuple[str, ...], path: Path, before: int | None = None) -> bool:
        """The directory of ``path`` was fsynced after ``path`` was last made, renamed or
        removed (``kinds``), and before the event at index ``before`` if given."""
        where = os.stat(path.parent)
        return ("fsync_dir", (where.st_dev, where.st_ino)) in self.events[
            self.index(kinds, path) + 1:before]

    def made_durably(self, path: Path) -> bool:
        """``path`` was fsynced into its directory after it was made; a renamed file's
        bytes were fsynced before it took this name."""
        made = self.index(MADE, path)
        if self.events[made][0] == "renamed":
            st = os.stat(path)
            if ("fsync_file", (st.st_dev, st.st_ino)) not in self.events[:made]:
                return False
        return self.synced_after(MADE, path)


MADE = ("made", "renamed")


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


async def test_a_placed_artifact_and_its_new_directories_are_synced(
        gateway: Gateway, disk: Disk) -> None:
    token = await leased_task(gateway)
    status, stored = await upload(gateway, "t1", "report.csv", b"the report", token)
    assert status == 201
    target = gateway.system.artifact_path("t1", "report.csv", stored["sha256"])
    assert disk.made_durably(target)
    assert disk.made_durably(target.parent)  # the task's directory, new with it
    artifacts = target.parent.parent
    assert disk.made_durably(artifacts) and disk.made_durably(artifacts / ".staging")
    status, stored = await upload(gateway, "t1", "report.csv", b"version two", token)
    assert status == 201
    assert disk.made_durably(gateway.system.artifact_path("t1", "report.csv",
                                                          stored["sha256"]))


async def test_an_online_backup_is_synced(gateway: Gateway, disk: Disk) -> None:
    status, made = await gateway.call("POST", "/v1/admin/backup", "admin")
    assert status == 200
    out = Path(made["path"])
    assert disk.made_durably(out) and disk.made_durably(out.parent)


def test_a_new_data_directory_and_its_lock_file_are_synced(tmp_path: Path,
                                                           disk: Disk) -> None:
    data = tmp_path / "srv" / "var"
    with DataDirLock(data):  # what `serve` holds first; SQLite syncs the database's name
        for made in (data.parent, data, data / "leasegate.lock"):
            assert disk.made_durably(made), made


def test_backup_and_restore_from_the_shell_are_synced(tmp_path: Path, disk: Disk) -> None:
    data = tmp_path / "var"
    data.mkdir()
    open_db(data / "leasegate.db").close()
    out = tmp_path / "copies" / "copy.db"
    assert main(["backup", "--out", str(out), "--data", str(data)]) == 0
    assert disk.made_durably(out) and disk.made_durably(out.parent)
    # Into a data directory that does not exist yet: it, its lock file and the database.
    fresh = tmp_path / "new" / "var"
    assert main(["restore", str(out), "--data", str(fresh)]) == 0
    for made in (fresh.parent, fresh, fresh / "leasegate.lock", fresh / "leasegate.db"):
        assert disk.made_durably(made), made
    # Over a database with a WAL: the WAL is gone for good before the copy takes its
    # place (replayed onto the restored file it would corrupt it).
    wal = fresh / "leasegate.db-wal"
    wal.write_bytes(b"frames of the database being replaced")
    assert main(["restore", str(out), "--data", str(fresh)]) == 0
    assert disk.synced_after(("gone",), wal, before=disk.index(MADE, fresh / "leasegate.db"))
    assert disk.made_durably(fresh / "leasegate.db")
