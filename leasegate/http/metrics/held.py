"""Prometheus families of what callers hold open: waiting long-polls and connections
(collected with the rest on scrape)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from leasegate.http.server.held_polls import WaitingPolls
from leasegate.http.server.listener import ConnectionGate


def hold_families(polls: WaitingPolls, gate: ConnectionGate | None) -> Iterator[Metric]:
    yield GaugeMetricFamily("leasegate_http_held_polls",
                            "Long-polls and event streams the HTTP layer holds open now, "
                            "counted against their key's and address's bounds", value=polls.held)
    yield CounterMetricFamily("leasegate_http_held_polls_refused",
                              "Long-polls and event streams refused (429): their key or "
                              "address held its bound", value=polls.refused)
    if gate is None:  # not served by leasegate serve (tests in one process)
        return
    yield GaugeMetricFamily("leasegate_http_connections", "Open HTTP connections",
                            value=gate.open)
    yield GaugeMetricFamily("leasegate_http_connections_limit",
                            "Most HTTP connections open at once (max_connections, or what "
                            "the open-file limit allows)", value=gate.total)
    refused = CounterMetricFamily("leasegate_http_connections_refused",
                                  "Connections closed as soon as accepted: their address "
                                  "held its bound, or the server held its total",
                                  labels=["bound"])
    for bound in ("address", "total"):
        refused.add_metric([bound], gate.refused[bound])
    yield refused
