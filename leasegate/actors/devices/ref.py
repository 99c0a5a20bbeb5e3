"""The device tracker's tag: a ``Ref[Devices]`` takes the messages of
``sightings.py``."""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Devices:
    """Tags the device tracker's messages (``Ask[Devices, ...]``) and refs."""


DevicesRef: TypeAlias = Ref[Devices]
