"""File-system changes that survive a power cut: every name leasegate relies on is
fsynced into its directory.

``fsync`` on a file makes its bytes durable, not its name: the name lives in the
directory, so a rename or a new directory survives a power cut only once that
directory is fsynced too (ext4 or XFS usually commit it within seconds; a cut in
between leaves a committed row naming a file that is not there). Everything that
must survive goes through here::

    make_dir_durably(data / "artifacts" / "t_1")   # mkdir -p, each new one fsynced
    replace_durably(staged, target)                # fsync the file, rename, fsync the dir

Nothing else needs it: staging files are temporary (their name becomes durable
when :func:`replace_durably` moves them), and deletions are never made durable
(a file that comes back after a cut is an orphan for the sweeps). All of these
block on the disk: call them from a worker or database thread.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(path: Path) -> None:
    """Make the entries of ``path`` (created, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Make the bytes of the file at ``path`` durable (cheap if they already are)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dir_durably(path: Path) -> None:
    """``mkdir -p path``: each directory created is fsynced into its parent. One
    ``stat`` and nothing else when ``path`` exists (the common case)."""
    if path.is_dir():
        return
    missing: list[Path] = []
    ancestor = path
    while not ancestor.exists():  # "/" and "." always exist: this ends
        missing.append(ancestor)
        ancestor = ancestor.parent
    path.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        fsync_directory(created.parent)


def replace_durably(source: Path, target: Path) -> None:
    """``os.replace(source, target)`` that survives a power cut: the file's bytes are
    fsynced before the rename (a renamed file must never show up empty) and the
    target's directory after it. The source directory is not fsynced: at worst a
    cut leaves the old name too, and no old name is one leasegate reads."""
    fsync_file(source)
    os.replace(source, target)
    fsync_directory(target.parent)
