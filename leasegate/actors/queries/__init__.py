"""The query actor: read-only work, delivered at least once.

Attempts are counted when a query is leased; an expired lease puts the query
back to ``queued`` at once, a failed result after a backoff (``results.py``) and a
snooze after its own wait (spending no attempt), until its ``max_attempts`` (then
``failed``; a failure the worker marks not retryable fails it at once); each
attempt's error is kept (``errors``); a query past its TTL is ``expired`` first
(rerunning it would be pointless); finished rows are purged after
``query_retention``, each leaving a tombstone (tenant, id, fingerprint, final
status) for ``id_tombstone_retention`` so that a resubmit of its id is a replay or
6004, never a new query. Queries never touch worker presence: a live query loop
must not hide a dead task loop.

Deadlines are timers: the actor wakes exactly when the next lease, TTL or retry
wait runs out, not on a coarse tick and not on the next lease call. A query waiting
for its retry is ``queued`` with ``next_attempt_at`` set; no lease takes it until
the timer clears that column (and wakes the waiting leases).

Its files, as every actor's: its tag (in the package itself), ``views.py`` (its
replies), ``turn.py`` (its turn context, table and handler registry), its messages
each followed by its handler (``submit.py``, ``reads.py``, ``lease.py``,
``results.py``, with the backoff), its timers and periodic jobs (``deadlines.py``),
and ``actor.py`` (how it is opened). What it shares with the task actor is in
``leasegate.actors.queue``.
"""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.channels import JobQueue
from leasegate.actors.runtime.mailbox import Ref


class Queries(JobQueue):
    """Tags the query actor's messages (``Ask[Queries, ...]``) and refs."""


QueriesRef: TypeAlias = Ref[Queries]
