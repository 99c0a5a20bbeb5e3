"""The webhooks actor: a tenant's endpoints, and the deliveries of its jobs' terminal
events to them (Standard Webhooks).

- ``events.py``: which transition is which event, and the retry schedule;
- ``endpoints.py``: creating, reading, changing, deleting endpoints, rotating secrets;
- ``deliveries.py``: listing and redelivering, and what the deliverer (the HTTP
  layer's ``webhook_delivery``) asks: the due deliveries, and each attempt recorded.

The deliveries themselves are written by the task and query actors, in the
transaction of the transition (``storage/webhooks_sql.write_outbox``).
"""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Webhooks:
    """Tags the webhooks actor's messages (``Ask[Webhooks, ...]``) and refs."""


WebhooksRef: TypeAlias = Ref[Webhooks]
