"""The keys actor: API keys and the principals they stand for.

Secrets are never stored; only their SHA-256 (``leasegate.ids``). A
presented key is found by its public ``key_id`` and its secret compared in
constant time by the HTTP layer.

Its files, as every actor's: this package's ``__init__`` holds its tag (what
others hold), ``views.py`` (its replies), ``turn.py`` (its turn context and handler registry),
``records.py`` (its messages, each followed by its handler) and ``actor.py``
(how it is opened).
"""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Keys:
    """Tags the keys actor's messages (``Ask[Keys, ...]``) and refs."""


KeysRef: TypeAlias = Ref[Keys]
