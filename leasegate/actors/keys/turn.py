"""The keys actor's turn context and handler registry.

The keys actor keeps no state of its own beyond its table: its handlers take the
runtime's :class:`~leasegate.actors.runtime.turn.Turn` as it is.
"""

from __future__ import annotations

from leasegate.actors.keys.ref import Keys
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.turn import Turn

KEYS = Handlers(Keys, Turn)
"""What the keys actor does with each message (filled in by ``records.py``)."""
