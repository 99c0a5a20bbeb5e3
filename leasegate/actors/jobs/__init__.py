"""The jobs facade: tasks and queries as routes use them, with their money.

What runs in the caller's task (an HTTP request) and joins a queue to the ledger
is here, once for both channels (see ``channel.py``): the submit saga with its
hold (single and batch), and the ``billing`` each job view shows, filled in from
the ledger's holds. Routes hold a :class:`~leasegate.actors.jobs.channel.JobChannel`
per channel (``jobs.tasks``, ``jobs.queries``) and never fill in billing
themselves. What a queue tells the ledger after its commit is the queues' own
(``leasegate.actors.queue.turn``); the arrows go one way only, queues → ledger
(see ``leasegate.actors.ledger`` for the saga's crash points and what repairs
each).
"""
