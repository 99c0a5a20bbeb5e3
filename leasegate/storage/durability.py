"""Is the storage durable? "Durable before acknowledged" holds only if a commit is on
disk when the database says it is committed; some settings trade that for speed.

Every storage engine answers the question itself, from what the storage says (not
from our settings alone), through its one method ``durability()``
(:class:`ReportsDurability`): SQLite reads ``PRAGMA synchronous``
(:func:`leasegate.storage.connection.sqlite_durability`); PostgreSQL will read the
server's ``fsync`` and ``synchronous_commit``. What start-up does with the answer is
the same for every engine (:func:`admit`): refuse to serve, or, when the operator
allowed it (``unsafe_durability``), serve with one loud warning per start::

    durability = admit(await database.durability(), allow_unsafe=settings.unsafe_durability)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("leasegate.storage")


@dataclass(frozen=True)
class Durability:
    """What the storage promises. ``weakened_by`` names each setting that breaks the
    promise, with its value and what keeps it (e.g. ``"sqlite_synchronous = NORMAL
    (FULL or EXTRA keeps it)"``); empty when nothing does."""

    weakened_by: tuple[str, ...] = ()

    @property
    def durable(self) -> bool:
        return not self.weakened_by


class ReportsDurability(Protocol):
    """The one method a storage engine implements for this."""

    async def durability(self) -> Durability:
        """The storage's own answer, read from the storage (no caching)."""
        ...


class StorageNotDurable(RuntimeError):
    """Serving was refused: a setting lets a power cut lose acknowledged writes."""


def admit(durability: Durability, *, allow_unsafe: bool) -> Durability:
    """Returns ``durability`` if the gateway may serve on it. Not durable: raises
    :class:`StorageNotDurable` naming the settings, unless ``allow_unsafe``, then
    logs one WARNING line (on every start: an operator must not forget it)."""
    if durability.durable:
        return durability
    what = "; ".join(durability.weakened_by)
    if not allow_unsafe:
        raise StorageNotDurable(
            f"storage not durable: {what}: a power cut can lose writes that were already "
            "acknowledged; not serving (--unsafe-durability, or the setting "
            "unsafe_durability = true, serves anyway)")
    log.warning("NOT DURABLE: %s: a power cut can lose writes that were already "
                "acknowledged; serving anyway (unsafe_durability)", what)
    return durability
