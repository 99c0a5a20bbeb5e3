"""The schedules actor: recurring schedules, each firing a job on its cron times.

A schedule (``schedules`` table) holds a five-field cron in an IANA time zone, a
channel and a template (a submit body of that channel without its id). Each fire
submits the job ``<schedule_id>@<fire time, UTC, RFC 3339>``: the id makes a second
submit of the same fire a replay, so a fire makes one job whichever gateway makes it,
after a restart, or twice over.

The actor's timer wakes exactly at the earliest ``next_fire_at`` (``timer.py``): in one
turn it records each due fire as ``pending`` (keyed by schedule and fire time: one row
whoever claims it; on PostgreSQL the actor's turns are one at a time across gateways)
and moves the schedule to its next cron time. Once that commits, the fires go to the
submitter (``submitter.py``, a service of the system, outside any turn: the actor
cannot ask the queues and the ledger inside a turn), which submits each through the
jobs facade (the hold first, as any submit) and tells the actor the outcome. Crash
points: before the claim commits, nothing happened and the fire is still due; after
it, the fire is pending and is handed over again at start-up and by the periodic job
``resend_pending_fires``; after the submit, before its outcome is recorded, the new
submit is a replay.

Its files, as every actor's: its tag (in the package itself), ``views.py`` (its replies),
``turn.py`` (its turn context, handler registry and outbox), ``records.py`` (its
messages, each followed by its handler), ``cron.py`` (cron times), ``timer.py`` (the
claims and their repair), ``actor.py`` (how it is opened) and ``submitter.py``.
"""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Schedules:
    """Tags the schedules actor's messages (``Ask[Schedules, ...]``) and refs."""


SchedulesRef: TypeAlias = Ref[Schedules]
