"""Job outcomes and dispatch latency, counted from the job events.

The queue actors publish each event after its commit (``EventHub.own_listeners``:
this gateway's; with several gateways, each counts its own),
single and batch routes alike, so these figures are what happened to jobs,
counted without a counter in the actors. The console's charts count the same
(``storage.activity_sql``, from the job history, with these rules in SQL)::

    families = JobEventMetrics(registry)
    system.events.own_listeners.append(families.on_event)
"""

from __future__ import annotations

from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from leasegate.actors.event_stream import JobEvent

FINISHED: Final = frozenset({"succeeded", "failed", "canceled", "expired"})
# Events recorded on a job that has already ended (the ledger's settlement).
AFTER_THE_END: Final = frozenset({"settled"})
# Series per job kind: the first kinds seen; later ones are summed under OTHER_KINDS
# (not an id: no kind is called that), so callers inventing kinds add no series.
METRIC_KINDS: Final = 100
OTHER_KINDS: Final = "(other)"
DISPATCH_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                           30.0, 60.0, 300.0, 900.0, 3600.0)


def ended(event: JobEvent) -> str | None:
    """How the job ended (its final status) if this event ended it, else None."""
    if event.status in FINISHED and event.kind not in AFTER_THE_END:
        return event.status
    return None


def first_dispatch_wait(event: JobEvent) -> float | None:
    """Seconds from the job becoming leasable (its submit, or its ``not_before`` if
    later) to its first lease, if this event is that lease. Later leases are left
    out: a requeued job became leasable again long after its submit."""
    if event.kind != "leased" or event.detail.get("attempt") != 1:
        return None
    waited = event.detail.get("waited")
    return float(waited) if isinstance(waited, int | float) else None


class JobEventMetrics:
    """``leasegate_job_outcomes_total`` and ``leasegate_dispatch_latency_seconds``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.outcomes = Counter(
            "leasegate_job_outcomes", "Jobs that ended, by channel, job kind (the first "
            f"{METRIC_KINDS} kinds seen; the rest as kind=\"{OTHER_KINDS}\") and final status",
            ["channel", "kind", "outcome"], registry=registry)
        self.dispatch = Histogram(
            "leasegate_dispatch_latency_seconds", "Time from a job becoming leasable "
            "(submit, or not_before if later) to its first lease", ["channel"],
            registry=registry, buckets=DISPATCH_BUCKETS)
        self._kinds: set[str] = set()
        # Label children by key: labels() costs a lock and several dict lookups.
        self._ended: dict[tuple[str, str, str], Any] = {}
        self._dispatched: dict[str, Any] = {}

    def on_event(self, event: JobEvent) -> None:
        """Count one job event (a hub listener: on the trio thread, quick, never raises)."""
        outcome = ended(event)
        if outcome is not None:
            key = (event.channel, self._kind(event.job_kind), outcome)
            counter = self._ended.get(key)
            if counter is None:
                counter = self._ended[key] = self.outcomes.labels(*key)
            counter.inc()
            return
        waited = first_dispatch_wait(event)
        if waited is not None:
            timer = self._dispatched.get(event.channel)
            if timer is None:
                timer = self._dispatched[event.channel] = self.dispatch.labels(event.channel)
            timer.observe(waited)

    def _kind(self, kind: str) -> str:
        if kind in self._kinds:
            return kind
        if len(self._kinds) < METRIC_KINDS:
            self._kinds.add(kind)
            return kind
        return OTHER_KINDS
