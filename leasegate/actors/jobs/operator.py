"""An operator's retries as routes use them, on either channel::

    await jobs.task_actions.retry("t1", reason="site fixed", by="ops (k1)")
    await jobs.task_actions.redrive(Redrive(status="failed", site="shop"), reason=..., by=...)

A billed job's hold is placed again before the job is requeued (402 when the tenant
is short, and nothing is retried), and given back in full should the requeue be
refused (it changed meanwhile): the saga of a submit, for a new attempt. A redrive
selects the jobs in the queue, holds again those with ``max_cost`` in one ledger
message per 100, and retries them 100 a message, each on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from leasegate.actors.jobs.channel import JobChannel
from leasegate.actors.ledger.holds import HoldAgain, HoldsAgain, Settle
from leasegate.actors.queue.retry import FindRetryable, Redrive, RetryCandidate, RetryJob
from leasegate.actors.queue.sites import check_reason
from leasegate.actors.runtime.batches import MAX_BATCH
from leasegate.actors.runtime.mailbox import Ask, Ref
from leasegate.actors.tasks import Tasks
from leasegate.actors.tasks.control import (
    FindStaleTasks,
    ReclaimAction,
    ReclaimTask,
    ReclaimTasks,
    StaleReclaimed,
)
from leasegate.actors.views import Billing
from leasegate.errors import LeasegateError


class RetryableView(Protocol):
    @property
    def job_id(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def billing(self) -> Billing | None: ...


A = TypeVar("A")
V = TypeVar("V", bound=RetryableView)


@dataclass(frozen=True)
class Redriven:
    matched: int
    requeued: int


class OperatorActions(Generic[A, V]):
    """Retry and redrive on one channel."""

    def __init__(self, channel: JobChannel[Any, Any, Any], *,
                 retry: Callable[[str, str, str], RetryJob[A, V]],
                 retry_many: Callable[[tuple[Any, ...]],
                                      Ask[A, tuple[V | LeasegateError, ...]]],
                 find: type[FindRetryable[A]],
                 get: Callable[[str, str | None, bool], Ask[A, V]]) -> None:
        self.channel = channel
        self._retry, self._retry_many, self._find, self._get = retry, retry_many, find, get
        self.statuses = find.statuses  # what this channel retries

    async def retry(self, job_id: str, *, reason: str, by: str) -> V:
        """One job back in line (409 unless failed, expired or, a task, canceled; 402
        when its hold cannot be placed again)."""
        message = self._retry(job_id, reason, by)
        message.check()  # a bad reason is refused before any money moves
        channel = self.channel
        view = await channel.queue.ask(self._get(job_id, None, False))
        placed = False
        max_cost = None if view.billing is None else view.billing.max_cost
        if max_cost is not None and view.status in self.statuses:
            placed = (await channel.ledger.ask(HoldAgain(
                channel.kind.channel, job_id, view.tenant, max_cost))).created
        try:
            retried: V = await channel.ask(message)
        except LeasegateError:
            if placed:
                await self._give_back(job_id)
            raise
        return retried

    async def redrive(self, selection: Redrive, *, reason: str, by: str,
                      dry_run: bool) -> Redriven:
        """Retry every job the selection matches, up to its ``limit`` (the oldest
        first); ``dry_run``: count them only."""
        channel = self.channel
        check_reason(reason)  # a bad reason: 400, nothing looked up
        found = await channel.queue.ask(self._find(selection))
        if dry_run:
            return Redriven(found.matched, 0)
        requeued = 0
        jobs = found.jobs
        for start in range(0, len(jobs), MAX_BATCH):
            requeued += await self._retry_chunk(jobs[start:start + MAX_BATCH], reason, by)
        return Redriven(found.matched, requeued)

    async def _retry_chunk(self, jobs: tuple[RetryCandidate, ...], reason: str,
                           by: str) -> int:
        channel = self.channel
        billed = [job for job in jobs if job.max_cost is not None]
        placed: dict[str, bool] = {}
        if billed:
            answers = await channel.ledger.ask(HoldsAgain(tuple(
                HoldAgain(channel.kind.channel, job.job_id, job.tenant, job.max_cost or 0)
                for job in billed)))
            for job, answer in zip(billed, answers, strict=True):
                if not isinstance(answer, LeasegateError):  # short: left as it is
                    placed[job.job_id] = answer.created
        chosen = [job for job in jobs if job.max_cost is None or job.job_id in placed]
        if not chosen:
            return 0
        replies = await channel.queue.ask(self._retry_many(
            tuple(self._retry(job.job_id, reason, by) for job in chosen)))
        requeued = 0
        for job, reply in zip(chosen, replies, strict=True):
            if not isinstance(reply, LeasegateError):
                requeued += 1
            elif placed.get(job.job_id):
                await self._give_back(job.job_id)
        return requeued

    async def _give_back(self, job_id: str) -> None:
        """The hold placed for a retry that was refused: all of it back to the tenant."""
        await self.channel.ledger.tell(Settle(self.channel.kind.channel, job_id, "canceled", 0))


async def reclaim_stale(tasks: Ref[Tasks], selection: FindStaleTasks, action: ReclaimAction,
                        reason: str, *, by: str, dry_run: bool) -> StaleReclaimed:
    """A bulk reclaim (the API's and the console's): the stale tasks ``selection``
    matches, each reclaimed on its own (one no longer stale is skipped), 100 a message,
    unless ``dry_run``."""
    check_reason(reason)  # a bad reason: 400, nothing looked up (as a redrive)
    found = await tasks.ask(selection)
    reclaimed = 0
    if not dry_run:
        ids = found.task_ids
        for start in range(0, len(ids), MAX_BATCH):
            replies = await tasks.ask(ReclaimTasks(tuple(
                ReclaimTask(task_id, action, reason, by=by)
                for task_id in ids[start:start + MAX_BATCH])))
            reclaimed += sum(not isinstance(reply, LeasegateError) for reply in replies)
    return StaleReclaimed(found.matched, reclaimed)
