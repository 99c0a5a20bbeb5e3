"""The query actor's tag: a ``Ref[Queries]`` takes the messages of this package's
message modules and those every queue takes (``Ask[JobQueue, ...]``)."""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.channels import JobQueue
from leasegate.actors.runtime.mailbox import Ref


class Queries(JobQueue):
    """Tags the query actor's messages (``Ask[Queries, ...]``) and refs."""


QueriesRef: TypeAlias = Ref[Queries]
