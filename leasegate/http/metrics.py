"""Prometheus metrics: request counters, and a snapshot of the actors on scrape."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leasegate.actors.device_messages import CountDevices
from leasegate.actors.device_views import DeviceCounts
from leasegate.actors.query_messages import CountQueries
from leasegate.actors.query_views import QueryCounts
from leasegate.actors.system import System, SystemStatistics
from leasegate.actors.task_messages import CheckTaskHealth
from leasegate.actors.task_views import TaskHealthReport
from leasegate.http.device_metrics import device_families

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics(Collector):
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("leasegate_http_requests", "HTTP requests served",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("leasegate_http_request_seconds", "HTTP request latency",
                                 ["route"], registry=self.registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5, 1, 2.5, 5, 10, 30))
        self._ledger_ok = True
        self._snapshot: tuple[TaskHealthReport, tuple[QueryCounts, ...],
                              SystemStatistics] | None = None
        self._devices: DeviceCounts | None = None
        self.registry.register(self)
        # Label children by key: labels() costs a lock and several dict lookups.
        self._counted: dict[tuple[str, str, int], Any] = {}
        self._timed: dict[str, Any] = {}

    def observe(self, method: str, route: str, status: int, started: float | None) -> None:
        """Count one request. Labels stay bounded: ``route`` is a rule, never a raw
        path, and a method a client invented counts as "other"."""
        method = method if method in METHODS else "other"
        key = (method, route, status)
        counter = self._counted.get(key)
        if counter is None:
            counter = self._counted[key] = self.requests.labels(method, route, str(status))
        counter.inc()
        if started is not None:
            timer = self._timed.get(route)
            if timer is None:
                timer = self._timed[route] = self.latency.labels(route)
            timer.observe(time.perf_counter() - started)

    async def refresh(self, system: System) -> None:
        tasks = await system.tasks.mailbox.ask(CheckTaskHealth())
        queries = await system.queries.mailbox.ask(CountQueries())
        audit = system.ledger.last_audit
        self._ledger_ok = audit is None or audit.ok
        self._snapshot = (tasks, queries, system.statistics())
        self._devices = await system.devices.mailbox.ask(CountDevices())

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        if self._snapshot is None:
            return
        tasks, query_counts, stats = self._snapshot
        queued = GaugeMetricFamily("leasegate_tasks_queued", "Queued tasks", labels=["site"])
        for site, n in tasks.queued.items():
            queued.add_metric([site], n)
        yield queued
        yield GaugeMetricFamily("leasegate_tasks_stale", "Stale tasks waiting for an operator",
                                value=tasks.stale)
        yield GaugeMetricFamily("leasegate_lanes_blocked", "Lanes blocked by a stale task",
                                value=len(tasks.blocked_lanes))
        queries = GaugeMetricFamily("leasegate_queries", "Live queries",
                                    labels=["status", "site"])
        for row in query_counts:
            queries.add_metric([row.status, row.site], row.n)
        yield queries
        runs = GaugeMetricFamily("leasegate_job_runs", "Completed runs of each periodic job",
                                 labels=["owner", "job"])
        failures = GaugeMetricFamily("leasegate_job_failures", "Failed runs of each periodic job",
                                     labels=["owner", "job"])
        for job in stats.jobs + stats.services:
            runs.add_metric([job.owner, job.name], job.runs)
            failures.add_metric([job.owner, job.name], job.failures)
        yield runs
        yield failures
        parked = GaugeMetricFamily("leasegate_parked_requests", "Long-polls parked in an actor",
                                   labels=["actor"])
        commits = GaugeMetricFamily("leasegate_actor_commits", "Group commits per actor",
                                    labels=["actor"])
        errors = GaugeMetricFamily("leasegate_actor_internal_errors",
                                   "Messages that met a bug (answered 500, rolled back)",
                                   labels=["actor"])
        for actor in stats.actors:
            parked.add_metric([actor.name], actor.parked)
            commits.add_metric([actor.name], actor.commits)
            errors.add_metric([actor.name], actor.internal_errors)
        yield parked
        yield commits
        yield errors
        yield GaugeMetricFamily("leasegate_ledger_audit_ok",
                                "1 if the last ledger audit passed, else 0",
                                value=1 if self._ledger_ok else 0)
        if self._devices is not None:
            yield from device_families(self._devices)
