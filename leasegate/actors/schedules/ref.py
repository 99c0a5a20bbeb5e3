"""The schedules actor's tag: a ``Ref[Schedules]`` takes the messages of
``records.py``."""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Schedules:
    """Tags the schedules actor's messages (``Ask[Schedules, ...]``) and refs."""


SchedulesRef: TypeAlias = Ref[Schedules]
