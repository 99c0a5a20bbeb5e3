"""``/metrics``: the Prometheus families the gateway exposes."""
