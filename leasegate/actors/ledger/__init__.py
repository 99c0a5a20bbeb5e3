"""The ledger actor: prepaid holds, settlement, recovery and audit, in double entry.

Accounts: one per tenant, plus ``@world`` (money coming in), ``@holds``
(reserved) and ``@revenue`` (earned). ``credit`` is ``@world -> tenant``; a
hold is ``tenant -> @holds``; a settlement moves the charge ``@holds ->
@revenue`` and the rest ``@holds -> tenant``. Every transaction's lines sum
to zero, so the balances always do. Money enters only by a credit, which may not
take ``@world`` past ``-ledger_max_balance``: so no balance, and no sum of balances,
can leave 64-bit integers (see ``Settings.ledger_max_balance``); one credit or hold is
at most ``ledger_max_amount``. Past either: 6010 (``LedgerLimit``), nothing moves.

Settlement (at most once per job; a second settle changes nothing): a
succeeded job is charged the cost it reported, or the full hold if none; a
failed, canceled or expired job what the worker reported as delivered, else
nothing; always capped at the hold. A stale task's hold stays open until the
task is resolved (reclaim or late result).

The saga of a submit with ``max_cost`` (``leasegate.actors.jobs``), and
what repairs a crash (or a lost message) between any two steps:

1. The job id is chosen (the client's, or a generated one) and the ledger is
   asked for the hold. Crash before the hold commits: nothing happened; the
   client retries. Short funds: 6007, nothing enqueued.
2. The hold is committed, then the queue actor is asked to enqueue. Crash (or
   the caller gone) before the job commits: an open hold without a job.
   Repaired by recovery: a hold whose job does not exist is refunded once it
   is older than ``ledger_orphan_max_age`` (which the settings keep greater
   than ``task_hard_timeout``, so no job that could still be running loses
   its hold). A retry of the submit meanwhile reuses the same hold (idempotent
   by job id); a retry after the refund is refused (6004): the id's hold is
   settled, and a job must never run without one.
3. The queue refuses the submit (6004, a bad field, storage trouble): the
   hold this submit placed is released (refunded) at once. Crash before the
   release: as in 2, recovery refunds it past the orphan age, also when a job
   with this id exists but is not the hold's (another tenant, another or no
   ``max_cost``): that job's outcome is never charged to it. A hold that a
   job with this id, tenant and amount exists for is never released.
4. The job runs. Its hold stays open whatever happens (lease expiry, stale,
   pause) until the job is terminal; recovery never touches the hold of a
   job that exists and is not terminal.
5. The job ends: the queue actor commits the terminal state, then tells the
   ledger ``Settle`` (after its commit, without waiting). Crash between the
   commit and the settle, or a full ledger inbox, or a ledger already closed
   at shutdown: the settle is lost. Repaired by recovery (every
   ``ledger_recover_interval``): an open hold whose job is terminal is
   settled from the job's row (the same status and cost the message would
   have carried).
6. Settle and recovery race: both run inside this actor, one after the
   other, and both settle only a hold that is still open (a conditional
   update). Whichever comes first settles; the other changes nothing.
7. After ``ledger_settled_retention`` the settled hold row is deleted; the
   journal stays, and the job id stays in ``ledger_settled_jobs``, so a
   settle or a hold of that job id later changes nothing: it is never
   refunded or held again.

Recovery learns the jobs' states by reading the queue tables directly (a
read-only SELECT on the same database file, see ``storage/ledger_sql``): the
queue actors ask the ledger, so the ledger must never ask them back (two
bounded inboxes waiting on each other could deadlock).

Its files, as every actor's: its tag (in the package itself), ``views.py`` (its replies),
``turn.py`` (its turn context and handler registry), its messages each followed
by its handler (``holds.py``: holds and settlement; ``accounts.py``: credits and
reads; ``audit.py``: the books' checks), its periodic jobs (``recovery.py``), and
``actor.py`` (how it is opened).
"""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Ledger:
    """Tags the ledger's messages (``Ask[Ledger, ...]``) and refs."""


LedgerRef: TypeAlias = Ref[Ledger]
