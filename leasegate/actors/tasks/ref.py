"""The task actor's tag: a ``Ref[Tasks]`` takes the messages of this package's
message modules and those every queue takes (``Ask[JobQueue, ...]``)."""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.channels import JobQueue
from leasegate.actors.runtime.mailbox import Ref


class Tasks(JobQueue):
    """Tags the task actor's messages (``Ask[Tasks, ...]``) and refs."""


TasksRef: TypeAlias = Ref[Tasks]
