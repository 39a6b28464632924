"""The gateway's request metrics, labelled by route (served on the gateway's own ``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

PREFIX = "bertserve_gateway_"
# 50 µs .. 1 s with a boundary at exactly 10 ms (the latency SLO), as the models' own (python_backend/metrics.py).
LATENCY_BUCKETS = [
    0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0,
]  # fmt: skip


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.duration = Histogram(
            PREFIX + "request_duration_seconds",
            "Time from a request's arrival at the gateway to its response, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            PREFIX + "requests",
            "Requests answered, by route and HTTP status",
            ["route", "status"],
            registry=self.registry,
        )

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.duration.labels(route).observe(seconds)
        self.requests.labels(route, str(status)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
