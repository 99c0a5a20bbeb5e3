"""The data directory: where the database lives, and who holds it.

One writer per database: ``leasegate serve`` holds an exclusive ``flock`` on
``<data>/leasegate.lock`` for its whole life; a second one (or a restore)
finds it taken and refuses. The kernel drops the lock when the process dies,
so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from leasegate.storage.durable_files import fsync_directory, make_dir_durably

DB_NAME = "leasegate.db"
LOCK_NAME = "leasegate.lock"


class DataDirBusy(RuntimeError):
    """Another process holds the data directory."""


class DataDirUnusable(RuntimeError):
    """The data directory cannot be created or written (the message says why)."""


class NoDatabase(RuntimeError):
    """The data directory holds no database (a command that needs one was given the
    wrong ``--data``, or the server never ran there)."""


def require_database(data_dir: Path) -> Path:
    """The database in ``data_dir``; raises :class:`NoDatabase` if there is none, so a
    command run from the wrong folder never creates a new empty database."""
    path = db_path(data_dir)
    if not path.is_file():
        raise NoDatabase(
            f"no database in {data_dir} (expected {path}); pass --data DIR, or start "
            f"`leasegate serve --data {data_dir}` once to create one"
        )
    return path


def db_path(data_dir: Path) -> Path:
    return data_dir / DB_NAME


class DataDirLock:
    """Exclusive hold on a data directory, as a context manager::

    with DataDirLock(Path("var")):
        serve()
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fd: int | None = None

    def acquire(self) -> None:
        lock_file = self.data_dir / LOCK_NAME
        try:
            # Durably: the database is created in here. (SQLite fsyncs this directory
            # itself when it creates the WAL beside the database.)
            make_dir_durably(self.data_dir)
            if not os.access(self.data_dir, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied")
            created = not lock_file.exists()
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if created:
                    fsync_directory(self.data_dir)
            except OSError:
                os.close(fd)
                raise
        except OSError as exc:
            raise DataDirUnusable(
                f"cannot use data directory {self.data_dir}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirBusy(
                f"{self.data_dir} is in use by another leasegate process "
                "(one server per data directory)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def first_missing(data_dir: Path) -> Path | None:
    """The outermost of ``data_dir`` and its parents that does not exist yet (what
    serving would create, absolute), or None if ``data_dir`` exists."""
    missing = None
    target = data_dir.absolute()
    for path in (target, *target.parents):
        if path.exists():
            break
        missing = path
    return missing


def remove_unused(data_dir: Path, made: Path | None) -> None:
    """Remove what serving created when it could not serve: ``data_dir`` holding only
    its lock file, and the parents made for it up to ``made`` (``first_missing``'s).
    Nothing else: a directory that held anything more is left as it is."""
    if made is None:
        return
    try:
        if {p.name for p in data_dir.iterdir()} - {LOCK_NAME}:
            return
        (data_dir / LOCK_NAME).unlink(missing_ok=True)
        path = data_dir.absolute()
        top = made.absolute()
        while True:
            path.rmdir()  # only if empty
            if path == top:
                break
            path = path.parent
    except OSError:
        pass  # left behind, as before: never worth failing over
