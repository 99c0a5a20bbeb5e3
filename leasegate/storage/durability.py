"""Whether a database keeps what it acknowledged through a crash or a power cut."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Durability:
    """``durable``: a commit survives a crash of the machine once acknowledged;
    otherwise ``weakened_by`` names each setting that breaks that, as ``name=value``
    with why."""

    durable: bool
    weakened_by: tuple[str, ...] = ()
