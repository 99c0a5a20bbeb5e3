"""The task actor: irreversible writes, delivered at most once, one in flight per lane.

A lease is only a *claim*: the worker must ``start`` within
``task_claim_window`` before it touches the site; an unstarted claim returns
to ``queued`` silently (nothing can have happened, no attempt is burned).
Once started, the task runs under a lease renewed every ``task_lease_ttl``;
a lease that lapses, or a run longer than ``task_hard_timeout``, makes the
task ``stale``: never retried automatically, it blocks its lane (site +
account) until an operator reclaims it or the last lease reports late.

Every transition is a conditional UPDATE (status and lease token), and the
database itself refuses a second task in flight on a lane (a partial unique
index). Lease, start, renew and result are the workers' heartbeat.

Deadlines are timers: the actor wakes exactly at the next claim expiry, lease
expiry, hard timeout, TTL or ``not_before``.

Finished tasks are purged after ``task_retention``; each leaves a tombstone
(tenant, id, fingerprint, final status) for ``id_tombstone_retention``, so an
upstream resubmitting the id days later gets a replay or 6004, never the
order placed again.

Its files, as every actor's: its tag (in the package itself), ``views.py`` (its replies),
``turn.py`` (its turn context, table and handler registry), its messages each
followed by its handler, split by who sends them (``submit.py`` and ``reads.py``:
clients; ``lease.py`` and ``fenced.py``: workers' leases, starts, renewals and
results; ``control.py``: clients' and operators' cancel, pause, resume and
reclaim; ``device_actions.py``: what devices' presence does to their tasks;
``artifacts.py``; ``presence.py``: the workers seen and the health report), its
timers and periodic jobs (``deadlines.py``), and ``actor.py`` (how it is
opened). What it shares with the query actor is in ``leasegate.actors.queue``.
"""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.channels import JobQueue
from leasegate.actors.runtime.mailbox import Ref


class Tasks(JobQueue):
    """Tags the task actor's messages (``Ask[Tasks, ...]``) and refs."""


TasksRef: TypeAlias = Ref[Tasks]
