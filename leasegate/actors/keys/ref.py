"""The keys actor's tag: a ``Ref[Keys]`` takes the messages of ``records.py``."""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Keys:
    """Tags the keys actor's messages (``Ask[Keys, ...]``) and refs."""


KeysRef: TypeAlias = Ref[Keys]
