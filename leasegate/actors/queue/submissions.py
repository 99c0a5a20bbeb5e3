"""Idempotent submission, shared by both job channels.

A client-chosen id that exists already is a replay when the payload is the
same, and 6004 when it differs; a server-generated id carries 96 random bits
and is never taken for a replay. A purged job leaves a tombstone (tenant,
fingerprint, final status) that the insert refuses and ``get`` returns, so a
resubmit days later is still a replay (or 6004), never the job again::

    job_id, replayed = submit_once(given_id, "t", digest, "task", insert, get)
    if replayed is None: ...   # created

Both channels' submit messages derive from :class:`Submit`: what the jobs facade
needs of one to hold its ``max_cost`` before it is enqueued.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Self, TypeVar

from leasegate.actors.runtime.mailbox import Ask
from leasegate.errors import IdempotencyConflict
from leasegate.storage.engine import Row

A_contra = TypeVar("A_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


class Submit(Ask[A_contra, R_co]):
    """A job's submit: its tenant, the ``max_cost`` to hold (None: no hold) and its id
    (None: the server chooses one), as the jobs facade reads them whatever the
    channel. Each channel's submit is a dataclass with these fields."""

    __slots__ = ()

    tenant: str
    max_cost: int | None

    @property
    def job_id(self) -> str | None:
        raise NotImplementedError

    def with_job_id(self, job_id: str) -> Self:
        """The same submit under ``job_id`` (the id is chosen before the hold)."""
        raise NotImplementedError


def new_id(prefix: str) -> str:
    """A server-generated id: 96 random bits, never a replay of an existing id."""
    return f"{prefix}-{secrets.token_hex(12)}"


def submit_once(given_id: str | None, prefix: str, digest: str, noun: str,
                insert: Callable[[str], bool],
                get: Callable[[str], Row | None]) -> tuple[str, str | None]:
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
