"""The jobs facade: tasks and queries as routes use them, with their money.

What runs in the caller's task (an HTTP request) and joins a queue to the ledger
is here, once for both channels (see ``channel.py``): the submit saga with its
hold (single and batch), and the ``billing`` each job view shows, filled in from
the ledger's holds. Routes hold a :class:`~leasegate.actors.jobs.channel.JobChannel`
per channel (``jobs.tasks``, ``jobs.queries``) and never fill in billing
themselves. What a queue tells the ledger after its commit is the queues' own
(``leasegate.actors.queue.turn``); the arrows go one way only, queues → ledger
(see ``leasegate.actors.ledger`` for the saga's crash points and what repairs
each). :class:`Jobs` holds both channels::

    jobs = Jobs(tasks=tasks_ref, queries=queries_ref, ledger=ledger_ref)
    await jobs.tasks.submit(SubmitTask(...))
    await jobs.queries.get("q1", tenant, wait_seconds=20)
"""

from __future__ import annotations

from leasegate.actors.jobs.channel import JobChannel
from leasegate.actors.jobs.operator import OperatorActions
from leasegate.actors.jobs.sites import Sites
from leasegate.actors.ledger import LedgerRef
from leasegate.actors.queries import Queries, QueriesRef
from leasegate.actors.queries.operator import FindRetryableQueries, RetryQueries, RetryQuery
from leasegate.actors.queries.reads import GetQuery
from leasegate.actors.queries.submit import SubmitQueries
from leasegate.actors.queries.turn import QUERY_KIND
from leasegate.actors.queries.views import QuerySubmitted, QueryView
from leasegate.actors.tasks import Tasks, TasksRef
from leasegate.actors.tasks.operator import FindRetryableTasks, RetryTask, RetryTasks
from leasegate.actors.tasks.reads import GetTask
from leasegate.actors.tasks.submit import SubmitTasks
from leasegate.actors.tasks.turn import TASK_KIND
from leasegate.actors.tasks.views import TaskSubmitted, TaskView


class Jobs:
    """The task and query channels, each with its queue and the ledger."""

    def __init__(self, *, tasks: TasksRef, queries: QueriesRef, ledger: LedgerRef,
                 max_wait: float) -> None:
        self.tasks: JobChannel[Tasks, TaskSubmitted, TaskView] = JobChannel(
            TASK_KIND, tasks, ledger, max_wait=max_wait, get=GetTask, submit_many=SubmitTasks)
        self.queries: JobChannel[Queries, QuerySubmitted, QueryView] = JobChannel(
            QUERY_KIND, queries, ledger, max_wait=max_wait, get=GetQuery,
            submit_many=SubmitQueries)
        # An operator's retries and redrives, and the sites' dispatch controls.
        self.task_actions: OperatorActions[Tasks, TaskView] = OperatorActions(
            self.tasks, retry=RetryTask, retry_many=RetryTasks, find=FindRetryableTasks,
            get=GetTask)
        self.query_actions: OperatorActions[Queries, QueryView] = OperatorActions(
            self.queries, retry=RetryQuery, retry_many=RetryQueries,
            find=FindRetryableQueries, get=GetQuery)
        self.sites = Sites(tasks=tasks, queries=queries)
