"""What both job queues (the task actor and the query actor) share.

The two channels differ on purpose where their jobs do (a task is an irreversible
write, leased as a claim, started, fenced and never retried by itself; a query is
read-only and redelivered), and share everything else, written once here:

- ``turn.py``: :class:`~leasegate.actors.queue.turn.JobKind`, the descriptor of a
  channel's table (its channel name, id column, id prefix, settled statuses, table
  and 404), :class:`~leasegate.actors.queue.turn.QueueTurn`, the turn context both
  queues' handlers take (settings, history, settle notices, dry filters), and the
  settle notices: what a queue tells the ledger once a job with a hold ended;
- ``reads.py``: reading one job (``GetJob``, waiting until it settles with ``wait``)
  and a job's history;
- ``history.py``: the history recorder;
- ``leases.py``: lease tokens, site limits, dry filters, what waiting leases wait for;
- ``submissions.py``: idempotent submits (replays, tombstones, 6004);
- ``reports.py``: workers' results, judged and written set-based, and the checks of
  what a worker reports.

The live event stream the queues publish to is ``actors/event_stream.py``; the
wake-ups between gateways, ``actors/other_gateways.py``.
"""
