"""The ledger's tag: a ``Ref[Ledger]`` takes the messages of ``holds.py``,
``accounts.py`` and ``audit.py``."""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Ledger:
    """Tags the ledger's messages (``Ask[Ledger, ...]``) and refs."""


LedgerRef: TypeAlias = Ref[Ledger]
