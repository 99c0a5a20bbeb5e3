"""Prometheus metrics: request counters, job outcomes and dispatch latency (from the
job events), and a snapshot of the actors, the device tracker and what callers hold
open (parked long-polls, connections) on scrape.

By Prometheus' conventions: what only grows is a counter named ``..._total``,
no series has a ``_created`` twin, and both channels share one scheme
(``channel`` label). Labels stay bounded whatever callers invent: sites and
job kinds are capped (the rest summed under ``"(other)"``), routes are rules.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leasegate.actors.devices.sightings import CountDevices
from leasegate.actors.devices.views import DeviceCounts
from leasegate.actors.queries.reads import CountQueries
from leasegate.actors.queries.views import QueryCounts
from leasegate.actors.queue.sites import Backlog
from leasegate.actors.tasks.presence import CheckTaskHealth
from leasegate.actors.tasks.views import TaskHealthReport
from leasegate.http.metrics.jobs import JobEventMetrics
from leasegate.http.server.held_polls import WaitingPolls
from leasegate.http.server.listener import ConnectionGate
from leasegate.system import System, SystemStatistics

DEVICE_STATES = ("online", "away", "gone")
DEVICE_TRANSITIONS = ("away", "back", "gone")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Series per site for the sites with the most work; the rest summed under OTHER_SITES
# (not an id: no site is called that), so callers inventing sites add no series.
METRIC_SITES = 100
OTHER_SITES = "(other)"

# A ``_created`` series per counter and histogram series says when this process first
# counted it: nothing a dashboard reads, and twice the series. The switch is the
# library's own and process-wide (it holds no registry of other users here).
disable_created_metrics()  # type: ignore[no-untyped-call]


class Metrics(Collector):
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Fed by the event hub (``on_job_event``): counted where jobs end and start.
        self.job_events = JobEventMetrics(self.registry)
        self.on_job_event = self.job_events.on_event
        self.requests = Counter("leasegate_http_requests", "HTTP requests served",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("leasegate_http_request_duration_seconds", "HTTP request latency",
                                 ["route"], registry=self.registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5, 1, 2.5, 5, 10, 30))
        self._ledger_ok = True
        self._durable = False
        self._snapshot: tuple[TaskHealthReport, tuple[QueryCounts, ...],
                              SystemStatistics] | None = None
        self._devices: DeviceCounts | None = None
        self._artifacts: dict[str, int] = {}
        # (channel, site) -> its backlog, of the sites with the most queued work
        self._backlogs: dict[tuple[str, str], Backlog] = {}
        self._webhooks_dropped = 0
        self.registry.register(self)
        # process_* series (memory, CPU, open fds): the library's own collector.
        ProcessCollector(registry=self.registry)
        # Label children by key: labels() costs a lock and several dict lookups.
        self._counted: dict[tuple[str, str, int], Any] = {}
        self._timed: dict[str, Any] = {}
        self._scraped_at = 0.0  # the system's clock at refresh (jobs' overdue rule)
        # Token buckets held, by limiter ("key", "address"); set by the /metrics route.
        self.rate_limit_buckets: dict[str, int] = {}
        # What callers hold open; set by the /metrics route.
        self.holds: tuple[WaitingPolls, ConnectionGate | None] | None = None

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
        tasks = await system.tasks.ask(CheckTaskHealth(METRIC_SITES))
        queries = await system.queries.ask(CountQueries(METRIC_SITES))
        audit = system.last_audit
        self._ledger_ok = audit is None or audit.ok
        self._durable = system.durable
        self._snapshot = (tasks, queries, system.statistics())
        self._backlogs = await _backlogs(system, tasks, queries)
        self._scraped_at = system.clock.now()
        self._devices = await system.devices.ask(CountDevices())
        self._artifacts = system.artifacts.delete_failures.copy()
        self._webhooks_dropped = system.webhook_actor.turn.dropped

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        if self._snapshot is None:
            return
        tasks, query_counts, stats = self._snapshot
        jobs = GaugeMetricFamily("leasegate_jobs", "Live jobs by channel, status and site "
                                 f"(the sites with the most; the rest as site=\"{OTHER_SITES}\")",
                                 labels=["channel", "status", "site"])
        _by_site(jobs, ["task", "queued"], {site.site: site.queued for site in tasks.busiest},
                 tasks.queued)
        for count in query_counts:
            _by_site(jobs, ["query", count.status], count.by_site, count.n)
        yield jobs
        yield from _backlog_families(self._backlogs)
        yield GaugeMetricFamily("leasegate_tasks_stale", "Stale tasks waiting for an operator",
                                value=tasks.stale)
        yield GaugeMetricFamily("leasegate_lanes_blocked", "Lanes blocked by a stale task",
                                value=tasks.stale)
        yield from self._job_metrics(stats)
        if self._devices is not None:
            yield from device_families(self._devices)
        waiting = GaugeMetricFamily("leasegate_actor_waiting_polls",
                                   "Lease and result long-polls waiting inside each actor "
                                   "for a job (leasegate_http_held_polls: all the HTTP layer "
                                   "holds open)",
                                   labels=["actor"])
        commits = CounterMetricFamily("leasegate_actor_commits", "Group commits per actor",
                                      labels=["actor"])
        errors = CounterMetricFamily("leasegate_actor_internal_errors",
                                     "Messages that met a bug (answered 500, rolled back)",
                                     labels=["actor"])
        for actor in stats.actors:
            waiting.add_metric([actor.name], actor.waiting)
            commits.add_metric([actor.name], actor.commits)
            errors.add_metric([actor.name], actor.internal_errors)
        yield waiting
        yield commits
        yield errors
        if self.holds is not None:
            yield from hold_families(*self.holds)
        failures = CounterMetricFamily(
            "leasegate_artifact_delete_failures", "Artifact files not deleted (logged): given "
            "up by the deleter after its retries, or left by a sweep for its next run",
            labels=["by"])
        for by, n in sorted(self._artifacts.items()):
            failures.add_metric([by], n)
        yield failures
        yield CounterMetricFamily(
            "leasegate_webhook_deliveries_dropped", "Webhook deliveries this gateway failed "
            "unsent: the oldest pending of an endpoint past webhook_max_pending",
            value=self._webhooks_dropped)
        yield GaugeMetricFamily("leasegate_ledger_audit_ok",
                                "1 if the last ledger audit passed, else 0",
                                value=1 if self._ledger_ok else 0)
        yield GaugeMetricFamily("leasegate_durable",
                                "1 if the storage keeps durable-before-acknowledged, 0 if "
                                "served with unsafe_durability (a power cut can lose "
                                "acknowledged writes)", value=1 if self._durable else 0)

    def _job_metrics(self, stats: SystemStatistics) -> Iterator[Metric]:
        """Every periodic and on-demand job: runs, failures, last run, overdue; and the
        token buckets the idle-bucket sweep keeps small."""
        # Not "job": Prometheus gives that label to the scrape job (ours would become
        # "exported_job"), and here a job is a task or a query.
        labels = ["owner", "periodic"]
        runs = CounterMetricFamily("leasegate_periodic_runs", "Completed runs of each periodic job",
                                   labels=labels)
        failures = CounterMetricFamily("leasegate_periodic_failures",
                                       "Failed runs of each periodic job", labels=labels)
        last_run = GaugeMetricFamily("leasegate_periodic_last_run_timestamp_seconds",
                                     "Unix time of the job's last successful run (0: none yet)",
                                     labels=labels)
        overdue = GaugeMetricFamily("leasegate_periodic_overdue",
                                    "1 if the job has not run for three of its intervals "
                                    "(since start-up if it never ran); on-demand jobs never",
                                    labels=labels)
        for job in stats.jobs + stats.services:
            key = [job.owner, job.name]
            runs.add_metric(key, job.runs)
            failures.add_metric(key, job.failures)
            last_run.add_metric(key, job.last_run_at or 0.0)
            overdue.add_metric(key, 1 if job.overdue(self._scraped_at) else 0)
        yield from (runs, failures, last_run, overdue)
        buckets = GaugeMetricFamily("leasegate_rate_limit_buckets",
                                    "Token buckets held (idle ones are swept)",
                                    labels=["limiter"])
        for limiter, n in sorted(self.rate_limit_buckets.items()):
            buckets.add_metric([limiter], n)
        yield buckets


async def _backlogs(system: System, tasks: TaskHealthReport,
                    queries: tuple[QueryCounts, ...]) -> dict[tuple[str, str], Backlog]:
    """The backlog of each channel at the sites with the most queued work (up to
    ``METRIC_SITES`` of each channel): a few index seeks a site, never the queue."""
    sites = {site.site for site in tasks.busiest}
    sites.update(site for count in queries if count.status == "queued" for site in count.by_site)
    of_tasks, of_queries = await system.jobs.sites.backlogs(sorted(sites))
    found = {("task", site): b.backlog for site, b in of_tasks.items()}
    found.update((("query", site), b.backlog) for site, b in of_queries.items())
    return found


def _backlog_families(backlogs: dict[tuple[str, str], Backlog]) -> Iterator[Metric]:
    """What an autoscaler reads (KEDA's Prometheus scaler): per site and channel, the
    jobs a lease could take now and the age of the oldest (0 when there is none)."""
    depth = GaugeMetricFamily(
        "leasegate_leasable_jobs", "Jobs a lease could take now (pause and throttle "
        "aside; tasks: one per free lane), by site and channel", labels=["site", "channel"])
    age = GaugeMetricFamily(
        "leasegate_oldest_leasable_age_seconds", "Seconds the oldest leasable job has been "
        "leasable (0: none), by site and channel", labels=["site", "channel"])
    for (channel, site), backlog in sorted(backlogs.items()):
        depth.add_metric([site, channel], backlog.leasable)
        age.add_metric([site, channel], backlog.oldest_leasable_age_seconds or 0.0)
    yield depth
    yield age


def _by_site(family: GaugeMetricFamily, labels: list[str], by_site: dict[str, int],
             total: int) -> None:
    """One series per listed site, and what the others hold under ``OTHER_SITES``."""
    for site, n in by_site.items():
        family.add_metric([*labels, site], n)
    rest = total - sum(by_site.values())
    if rest:
        family.add_metric([*labels, OTHER_SITES], rest)


def _single(rows: Iterable[tuple[type[CounterMetricFamily | GaugeMetricFamily], str, str, float]]
            ) -> Iterator[Metric]:
    """A family of one unlabelled series for each (family type, name, help, value)."""
    for family, name, documentation, value in rows:
        yield family(name, documentation, value=value)


def device_families(counts: DeviceCounts) -> Iterator[Metric]:
    """The device tracker's."""
    devices = GaugeMetricFamily("leasegate_devices", "Tracked devices by state",
                                labels=["state"])
    for state in DEVICE_STATES:  # every state, zeros too: a dashboard needs no special case
        devices.add_metric([state], counts.by_state.get(state, 0))
    yield devices
    transitions = CounterMetricFamily("leasegate_device_transitions",
                                      "Device state changes since start-up (away, back, gone)",
                                      labels=["kind"])
    for kind in DEVICE_TRANSITIONS:
        transitions.add_metric([kind], counts.transitions.get(kind, 0))
    yield transitions
    yield from _single((
        (CounterMetricFamily, "leasegate_device_evictions", "Devices forgotten to make room "
         "(least recently seen, no live task)", counts.evictions),
        (CounterMetricFamily, "leasegate_device_refusals", "New devices refused (6008): the "
         "table was full of devices with live tasks", counts.refusals)))


def hold_families(polls: WaitingPolls, gate: ConnectionGate | None) -> Iterator[Metric]:
    """What callers hold open: waiting long-polls and connections."""
    yield from _single((
        (GaugeMetricFamily, "leasegate_http_held_polls", "Long-polls and event streams the "
         "HTTP layer holds open now, counted against their key's and address's bounds",
         polls.held),
        (CounterMetricFamily, "leasegate_http_held_polls_refused", "Long-polls and event "
         "streams refused (429): their key or address held its bound", polls.refused)))
    if gate is None:  # not served by leasegate serve (tests in one process)
        return
    yield from _single((
        (GaugeMetricFamily, "leasegate_http_connections", "Open HTTP connections", gate.open),
        (GaugeMetricFamily, "leasegate_http_connections_limit", "Most HTTP connections open "
         "at once (max_connections, or what the open-file limit allows)", gate.total)))
    refused = CounterMetricFamily("leasegate_http_connections_refused",
                                  "Connections closed as soon as accepted: their address "
                                  "held its bound, or the server held its total",
                                  labels=["bound"])
    for bound in ("address", "total"):
        refused.add_metric([bound], gate.refused[bound])
    yield refused
