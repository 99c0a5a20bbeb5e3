"""The webhooks actor: a tenant's endpoints, and the deliveries of its jobs' terminal
events to them (Standard Webhooks).

- ``endpoints.py``: creating, reading, changing, deleting endpoints, rotating secrets;
- ``deliveries.py``: listing and redelivering, and what the deliverer (the HTTP
  layer's ``webhook_delivery``) asks: the due deliveries, and each attempt recorded.

The deliveries themselves are written by the task and query actors, in the
transaction of the transition (``storage/webhooks_sql.write_outbox``).

Here, beside the actor's tag: which transitions are events, and how a failing
delivery is retried. An event is ``<channel>.<status>`` for a status the job enters
and that ends what the gateway does with it on its own: a stale task waits for an
operator, so it is one too. A query waiting for a retry is queued, not failed: no
event until its last attempt.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Webhooks:
    """Tags the webhooks actor's messages (``Ask[Webhooks, ...]``) and refs."""


WebhooksRef: TypeAlias = Ref[Webhooks]


EventType = Literal["task.succeeded", "task.failed", "task.canceled", "task.stale",
                    "task.expired", "query.succeeded", "query.failed", "query.expired"]
EVENT_TYPES: Final[tuple[str, ...]] = ("task.succeeded", "task.failed", "task.canceled",
                                       "task.stale", "task.expired", "query.succeeded",
                                       "query.failed", "query.expired")

# Svix's schedule: the delay after each failed attempt (5 s, 5 min, 30 min, 2 h, 5 h,
# 10 h, 10 h): eight attempts over some 27.6 hours, then the delivery is failed.
RETRY_DELAYS: Final = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
# An endpoint every attempt to which has failed for this long is disabled.
DISABLE_AFTER: Final = 86400.0
# A rotated secret signs beside its successor for this long.
ROTATION_OVERLAP: Final = 86400.0


def event_type(channel: str, status: str) -> str | None:
    """The event a job of ``channel`` entering ``status`` is, or None."""
    name = f"{channel}.{status}"
    return name if name in EVENT_TYPES else None


def retry_delay(attempts: int) -> float | None:
    """The delay before the next attempt once ``attempts`` have failed (None: no more)."""
    return RETRY_DELAYS[attempts - 1] if attempts <= len(RETRY_DELAYS) else None
