"""Prometheus families of the device tracker (collected with the rest on scrape)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from leasegate.actors.devices.views import DeviceCounts

STATES = ("online", "away", "gone")
TRANSITIONS = ("away", "back", "gone")


def device_families(counts: DeviceCounts) -> Iterator[Metric]:
    devices = GaugeMetricFamily("leasegate_devices", "Tracked devices by state",
                                labels=["state"])
    for state in STATES:  # every state, zeros too: a dashboard needs no special case
        devices.add_metric([state], counts.by_state.get(state, 0))
    yield devices
    transitions = CounterMetricFamily("leasegate_device_transitions",
                                      "Device state changes since start-up (away, back, gone)",
                                      labels=["kind"])
    for kind in TRANSITIONS:
        transitions.add_metric([kind], counts.transitions.get(kind, 0))
    yield transitions
    yield CounterMetricFamily("leasegate_device_evictions",
                              "Devices forgotten to make room (least recently seen, no live "
                              "task)", value=counts.evictions)
    yield CounterMetricFamily("leasegate_device_refusals",
                              "New devices refused (6008): the table was full of devices with "
                              "live tasks", value=counts.refusals)
