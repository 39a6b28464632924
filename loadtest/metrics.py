"""The load tester's own Prometheus metrics, all declared here, served on a port while it runs."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

logger = logging.getLogger(__name__)

# Client-observed latency: fine steps up to and just past the 10 ms budget (0.01 is a bucket edge, so
# "within budget" is read straight off le="0.01"), geometric from 50 us below, coarse above.
LATENCY_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.004,
    0.005,
    0.006,
    0.007,
    0.008,
    0.009,
    0.01,
    0.0125,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class LoadTestMetrics:
    """Metric objects bound to a private registry (so tests and several runs never collide)."""

    def __init__(self, model: str, mode: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_duration = Histogram(
            "loadtest_request_duration_seconds",
            "Client-side latency of successful requests (open loop: from the intended send time)",
            ["model", "mode"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(model=model, mode=mode)
        self._requests = Counter(
            "loadtest_requests",
            "Requests by outcome: ok, or the gRPC status / HTTP code of the failure",
            ["model", "mode", "outcome"],
            registry=self.registry,
        )
        self._requests_model = {"model": model, "mode": mode}
        self.target_load = Gauge(
            "loadtest_target_load",
            "Current step: concurrency (closed loop) or requests per second (open loop)",
            ["model", "mode"],
            registry=self.registry,
        ).labels(model=model, mode=mode)
        self._server: object | None = None

    def observe(self, outcome: str, latency_s: float) -> None:
        self._requests.labels(outcome=outcome, **self._requests_model).inc()
        if outcome == "ok":
            self.request_duration.observe(latency_s)

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Expose /metrics on address:port; port 0 disables."""
        if port == 0:
            return
        self._server = start_http_server(port, addr=address, registry=self.registry)
        logger.info("load tester metrics on http://%s:%d/metrics", address, port)

    def stop(self) -> None:
        if self._server is not None:
            server, thread = self._server  # type: ignore[misc]
            server.shutdown()
            thread.join(timeout=2)
            self._server = None
