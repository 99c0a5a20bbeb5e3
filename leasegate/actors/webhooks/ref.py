"""The webhooks actor's tag: a ``Ref[Webhooks]`` takes the messages of ``endpoints.py``
and ``deliveries.py``."""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Webhooks:
    """Tags the webhooks actor's messages (``Ask[Webhooks, ...]``) and refs."""


WebhooksRef: TypeAlias = Ref[Webhooks]
