"""The memory allocator ``leasegate serve`` runs on: glibc's, so that what a flood
of connections took goes back to the system once it is over.

CPython's own allocator for small objects (pymalloc) gives a 1 MiB arena back
only when nothing in it is alive, and never the empty pools inside one. After
2,000 connections came and went (bench/flood.py), the live objects were back to
their size before, but 70 arenas were still held, 40 MB of them empty pools,
pinned by a few kilobytes of objects made during the flood that live on (metrics
children, cached statements, imports): RSS 63 MiB before, 117 during, 110 after.
Under glibc's malloc (``PYTHONMALLOC=malloc``), ``malloc_trim`` hands back every
free page of the heap, whatever lives around it: 65 -> 122 -> 70 MiB. The server's
CPU per job measured the same either way (bench/lifecycle.py, within its noise)::

    reexec_on_glibc_malloc()   # first thing in the serve command; may not return
"""

from __future__ import annotations

import os
import platform
import sys

VARIABLE = "PYTHONMALLOC"


def reexec_on_glibc_malloc() -> None:
    """Run this same command again, in this process (``exec``), with
    ``PYTHONMALLOC=malloc``; returns at once where that is already so, where the
    operator set ``PYTHONMALLOC`` (their choice stands), or where there is no glibc."""
    if VARIABLE in os.environ or sys.implementation.name != "cpython":
        return
    if platform.libc_ver()[0] != "glibc":
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, {**os.environ, VARIABLE: "malloc"})
