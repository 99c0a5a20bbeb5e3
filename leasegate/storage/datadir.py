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

DB_NAME = "leasegate.db"
LOCK_NAME = "leasegate.lock"


class DataDirBusy(RuntimeError):
    """Another process holds the data directory."""


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
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
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
