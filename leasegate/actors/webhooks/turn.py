"""The webhooks actor's turn context and handler registry."""

from __future__ import annotations

from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.turn import Turn
from leasegate.actors.webhooks import Webhooks
from leasegate.settings import Settings


class WebhookTurn(Turn):
    """The runtime's turn, the settings, and what this gateway has counted."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("webhooks")
        self.settings = settings
        # Deliveries this gateway failed unsent: past webhook_max_pending (/metrics).
        self.dropped = 0


WEBHOOKS = Handlers(Webhooks, WebhookTurn)
"""What the webhooks actor does with each message (``endpoints.py``, ``deliveries.py``)."""
