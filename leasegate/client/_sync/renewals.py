# Generated from leasegate/client/_async/renewals.py by scripts/sync_sdk.py: do not edit.
"""The lease renewals of one lease call's running tasks."""

from __future__ import annotations

import math

from leasegate.client._batch import submitted
from leasegate.client._http import path
from leasegate.client._job import Job
from leasegate.client._protocol import _WorkerBase
from leasegate.client._sync.backend import CancelScope, TaskGroup, Wakeup, current_time
from leasegate.client._sync.http import SyncHTTP


class Renewals:
    """The renewals of a lease call's running tasks, from one task (``Worker``: one
    thread) that runs while a handler does: it sleeps until the next renewal is due,
    sends each due renewal in a task (a thread) of its own, so that none waits for
    another, then files the job's next one. Most handlers end well before their first
    renewal (a third of the lease): they then cost nothing more here. :meth:`discard`
    (the handler ended) abandons a renewal on its way (``AsyncWorker``; a thread's call
    runs to its end, and its answer is ignored). Every change is made inside ``with
    self._changed`` (a lock for threads)."""

    def __init__(self, worker: _WorkerBase, http: SyncHTTP, group: TaskGroup) -> None:
        self._worker = worker
        self._http = http
        self._group = group
        self._live: set[Job] = set()  # handlers running: _run() returns at none
        self._due: dict[Job, float] = {}
        self._sending: dict[Job, CancelScope] = {}
        self._wake_at = math.inf  # when _run() wakes up next
        self._running = False  # _run() started and not yet returning
        self._changed = Wakeup()

    def add(self, job: Job, at: float) -> None:
        """``job``'s handler starts: renew at ``at`` (``current_time()``), then as the
        replies say, until :meth:`discard`."""
        with self._changed:
            self._live.add(job)
            if self._running:
                self._schedule(job, at)
                return
            self._due[job] = at  # read by the task as it starts
            self._running = True
        self._group.start_soon(self._run, name=f"renewals {job.worker_id}")

    def _schedule(self, job: Job, at: float) -> None:
        self._due[job] = at
        if at < self._wake_at:
            self._changed.notify()

    def discard(self, job: Job) -> None:
        """The handler ended: no more renewals (one on its way is abandoned)."""
        with self._changed:
            self._live.discard(job)
            self._due.pop(job, None)
            scope = self._sending.pop(job, None)
            if not self._live:
                self._changed.notify()  # the last: the renewals' task returns
        if scope is not None:
            scope.cancel()

    def _run(self) -> None:
        """Send the renewals as they fall due, while a handler runs."""
        with self._changed:
            while self._live:
                now = current_time()
                due = [job for job, at in self._due.items() if at <= now]
                for job in due:
                    del self._due[job]
                if len(due) == 1:
                    self._group.start_soon(self._renew, due[0], name=f"renew {due[0].id}")
                elif due:  # jobs started together come due together: one call for all
                    self._group.start_soon(self._renew_many, due, name="renew many")
                self._wake_at = min(self._due.values(), default=math.inf)
                self._changed.wait_until(self._wake_at)
            self._running = False

    def _renew(self, job: Job) -> None:
        with CancelScope() as scope:
            with self._changed:
                self._sending[job] = scope
            try:
                next_at = self._send(job)
            finally:
                with self._changed:
                    if self._sending.get(job) is scope:
                        del self._sending[job]
            with self._changed:
                # A reply that came just as the handler ended is taken in, but no more.
                if next_at is not None and job in self._live:
                    self._schedule(job, next_at)

    def _send(self, job: Job) -> float | None:
        """Renew ``job``'s lease once: when to renew it next (``current_time()``), or None
        if the lease is lost. Never raises (but is cancellable)."""
        try:
            reply, server_time = self._http.call_dated(
                "POST", path("tasks", job.id, "renew"), json=job._renew_body(), attempts=1
            )
            return current_time() + self._worker._next_renewal(job, reply, server_time)
        except Exception as error:
            delay = self._worker._renew_retry(job, error)
            return None if delay is None else current_time() + delay

    def _renew_many(self, jobs: list[Job]) -> None:
        """Renew several leases in one call (``POST /v1/tasks/renew``), each answered on
        its own. Not abandoned when a handler ends: its answer is then ignored."""
        body = {"worker_id": self._worker.worker_id, "items": [
            {"task_id": job.id, **{name: value for name, value in job._renew_body().items()
                                   if name != "worker_id"}} for job in jobs]}
        try:
            reply, server_time = self._http.call_dated(
                "POST", path("tasks", "renew"), json=body, attempts=1
            )
            answers = submitted(reply, "task", len(jobs))
        except Exception as error:
            answers, server_time = [error] * len(jobs), None
        with self._changed:
            now = current_time()
            for job, answer in zip(jobs, answers, strict=True):
                if job not in self._live:  # the handler ended meanwhile
                    continue
                if isinstance(answer, Exception):
                    delay = self._worker._renew_retry(job, answer)
                    if delay is not None:
                        self._schedule(job, now + delay)
                else:
                    self._schedule(job, now + self._worker._next_renewal(job, answer,
                                                                          server_time))
