"""``/metrics`` by Prometheus' conventions, read with prometheus_client's own parser:
counters are counters named ``..._total``, no ``_created`` twins, both channels in one
scheme, job outcomes per channel and kind, and the dispatch-latency histogram."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from leasegate.actors.event_stream import JobEvent
from leasegate.http.metrics.jobs import METRIC_KINDS, OTHER_KINDS, JobEventMetrics
from tests.conftest import EPOCH, Gateway
from tests.test_http_tasks import control, finish, lease_one, start, submit

# What only grows, whatever its name said before: each must be a counter.
COUNTERS = {"leasegate_http_requests", "leasegate_periodic_runs", "leasegate_periodic_failures",
            "leasegate_actor_commits", "leasegate_actor_internal_errors",
            "leasegate_job_outcomes", "leasegate_artifact_delete_failures",
            "leasegate_device_transitions", "leasegate_device_evictions",
            "leasegate_device_refusals"}


async def scrape(gw: Gateway) -> dict[str, Any]:
    response = await gw.client.get("/metrics", headers=gw.auth("admin"))
    assert response.status_code == 200
    text = await response.get_data(as_text=True)
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(family: Any, name: str, **labels: str) -> list[Sample]:
    return [s for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


async def test_metrics_follow_prometheus_conventions(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await submit(gateway, task_id="done", kind="place_order")
    await submit(gateway, task_id="dropped", kind="place_order", account="b")
    status, _ = await gateway.call("POST", "/v1/queries", "t1", json={
        "query_id": "q1", "site": "shop", "kind": "balance"})
    assert status == 201
    await trio.sleep(4)  # each waits 4 s for its first lease
    item = await lease_one(gateway, sites=["shop"], max=1)
    await start(gateway, item)
    await finish(gateway, item)
    await control(gateway, "dropped" if item["task_id"] == "done" else "done", "cancel")
    status, leased = await gateway.call("POST", "/v1/queries/lease", "worker",
                                        json={"worker_id": "w1", "wait_seconds": 0})
    assert status == 200 and len(leased["items"]) == 1
    families = await scrape(gateway)

    for family in families.values():
        for sample in family.samples:
            assert not sample.name.endswith("_created"), sample
        if family.type == "counter":
            assert {s.name for s in family.samples} == {family.name + "_total"}, family
    assert {name for name, f in families.items() if f.type == "counter"} >= COUNTERS
    assert not {"leasegate_tasks_queued", "leasegate_queries"} & families.keys()
    # "job" is the scrape job's label in Prometheus (ours would turn into "exported_job"),
    # and a job here is a task or a query: the periodic jobs' series say "periodic".
    for family in families.values():
        assert all("job" not in s.labels for s in family.samples), family.name
    runs = families["leasegate_periodic_runs"]
    assert {s.labels["periodic"] for s in runs.samples} >= {"recover_holds"}
    # The process collector's series, as every Prometheus client exports them.
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "process_open_fds"} \
        <= families.keys()
    assert "leasegate_http_request_duration_seconds" in families
    assert "leasegate_actor_waiting_polls" in families

    outcomes = families["leasegate_job_outcomes"]
    assert {(s.labels["channel"], s.labels["kind"], s.labels["outcome"], s.value)
            for s in outcomes.samples} == {("task", "place_order", "succeeded", 1.0),
                                           ("task", "place_order", "canceled", 1.0)}
    latency = families["leasegate_dispatch_latency_seconds"]
    assert latency.type == "histogram"
    for channel in ("task", "query"):
        name = "leasegate_dispatch_latency_seconds"
        [count] = samples(latency, name + "_count", channel=channel)
        [total] = samples(latency, name + "_sum", channel=channel)
        assert (count.value, total.value) == (1.0, 4.0)
        buckets = {s.labels["le"]: s.value for s in samples(latency, name + "_bucket",
                                                             channel=channel)}
        assert (buckets["2.5"], buckets["5.0"], buckets["+Inf"]) == (0.0, 1.0, 1.0)
    jobs = families["leasegate_jobs"]
    assert jobs.type == "gauge"
    assert {(s.labels["channel"], s.labels["status"], s.labels["site"], s.value)
            for s in jobs.samples} == {("query", "leased", "shop", 1.0)}


def test_job_kinds_are_capped_like_sites() -> None:
    registry = CollectorRegistry(auto_describe=True)
    counted = JobEventMetrics(registry)
    for i in range(METRIC_KINDS + 5):
        counted.on_event(JobEvent(i + 1, "query", f"q{i}", "t1", "shop", None, "result",
                                  "failed", EPOCH, {}, f"kind-{i}"))
    [family] = [f for f in text_string_to_metric_families(generate_latest(registry).decode())
                if f.name == "leasegate_job_outcomes"]
    kinds = {s.labels["kind"]: s.value for s in family.samples}
    assert len(kinds) == METRIC_KINDS + 1 and kinds[OTHER_KINDS] == 5
