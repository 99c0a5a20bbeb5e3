"""Idempotent submission, shared by both job channels.

A client-chosen id that exists already is a replay when the payload is the
same, and 6004 when it differs; a server-generated id carries 96 random bits
and is never taken for a replay. A purged job leaves a tombstone (tenant,
fingerprint, final status) that the insert refuses and ``get`` returns, so a
resubmit days later is still a replay (or 6004), never the job again::

    job_id, replayed = submit_once(given_id, "t", digest, "task", insert, get)
    if replayed is None: ...   # created
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable

from leasegate.errors import IdempotencyConflict


def new_id(prefix: str) -> str:
    """A server-generated id: 96 random bits, never a replay of an existing id."""
    return f"{prefix}-{secrets.token_hex(12)}"


def submit_once(given_id: str | None, prefix: str, digest: str, noun: str,
                insert: Callable[[str], bool],
                get: Callable[[str], sqlite3.Row | None]) -> tuple[str, str | None]:
    """Insert a submission once: ``(id, None)`` when it was created, ``(id, status)``
    for an identical replay of a client-chosen id.

    A different payload under that id is 6004. A generated id that collides
    (96 bits: never) is drawn again, never taken for a replay. The insert comes
    first, so a new submission costs one statement.
    """
    while True:
        job_id = given_id or new_id(prefix)
        if insert(job_id):
            return job_id, None
        if given_id is None:
            continue
        existing = get(job_id)
        assert existing is not None, job_id
        if existing["fingerprint"] != digest:
            raise IdempotencyConflict(f"{noun} {job_id} exists with a different payload")
        return job_id, str(existing["status"])
