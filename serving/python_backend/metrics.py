"""Every custom metric the models export, declared once (names carry the project prefix and unit suffix).

The families are created through ``pb_utils.MetricFamily`` and appear on Triton's metrics port (:8002).
Keep the returned object alive for the model's lifetime: Triton drops a family whose Python object dies.

Each ``observe``/``increment`` of a pb_utils metric is a synchronous round trip from the stub to the Triton
process (20-60 µs each on the 2-core box; a batch of 64 requests made ~70 of them before its responses could
leave). Updates therefore go through :class:`Recorder`, one thread that makes those calls in order, off the
request path; it waits with the GIL released, so the serving thread goes on meanwhile. A scrape may lag a
response by the recorder's queue (milliseconds); ``close()`` drains it before the model unloads. The queue is
bounded: should the recorder fall behind by ``QUEUE_CAPACITY`` updates, further ones are dropped and counted
(``Recorder.dropped``, logged at the first drop and at close) rather than held in memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "bertserve_"
# 50 µs .. 1 s, geometric-ish, with a boundary at exactly 10 ms (the latency SLO).
LATENCY_BUCKETS = [
    0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0,
]  # fmt: skip
QUEUE_CAPACITY = 10_000  # updates waiting for the recorder (a few hundred batches' worth)
BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128]
RATIO_BUCKETS = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
STAGES = ("tokenize", "collate", "infer", "respond")
REASONS = (
    "empty_text",
    "invalid_utf8",
    "text_too_large",
    "too_long",
    "bad_token_id",
    "bad_attention_mask",
    "bad_shape",
    "bad_parameter",
    "internal",
)


class Recorder:
    """Runs metric updates on one background thread, in the order they were made; drops (and counts) an update
    that finds ``capacity`` waiting."""

    def __init__(self, capacity: int = QUEUE_CAPACITY) -> None:
        self._queue: queue.Queue[tuple[Callable[[float], Any], float] | None] = queue.Queue(maxsize=capacity)
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="bertserve-metrics", daemon=True)
        self._thread.start()

    def submit(self, update: Callable[[float], Any], value: float) -> None:
        try:
            self._queue.put_nowait((update, value))
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("the metrics recorder is %d updates behind: dropping updates", self._queue.maxsize)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            update, value = item
            try:
                update(value)
            except Exception:  # a metric that failed to record must not stop the ones after it
                log.exception("metric update failed")

    def close(self, timeout_s: float = 10.0) -> None:
        """Record everything queued so far, then stop the thread."""
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            log.error("the metrics recorder did not take its stop within %.0f s", timeout_s)
        self._thread.join(timeout_s)
        if self.dropped:
            log.warning("%d metric updates were dropped while the recorder was behind", self.dropped)


class Later:
    """A metric child whose updates the recorder makes (the pb_utils Metric interface: observe, increment)."""

    __slots__ = ("_metric", "_recorder")

    def __init__(self, metric: Any, recorder: Recorder) -> None:
        self._metric, self._recorder = metric, recorder

    def observe(self, value: float) -> None:
        self._recorder.submit(self._metric.observe, value)

    def increment(self, value: float) -> None:
        self._recorder.submit(self._metric.increment, value)


class ModelMetrics:
    """The metric children of one model, with labels bound once; updates are recorded off the request path."""

    def __init__(self, pb_utils: Any, model: str, stages: tuple[str, ...] = STAGES) -> None:
        family = pb_utils.MetricFamily
        self._families = [
            request := family(
                name=PREFIX + "request_duration_seconds",
                description="Per request, from the model's execute() entry to its response being sent "
                "(excludes gRPC/HTTP handling, Triton queueing and ensemble hops)",
                kind=family.HISTOGRAM,
            ),
            stage := family(
                name=PREFIX + "stage_duration_seconds",
                description="Time per executed batch in each stage (tokenize, collate, infer, respond)",
                kind=family.HISTOGRAM,
            ),
            batch := family(
                name=PREFIX + "batch_size", description="Sequences per executed batch", kind=family.HISTOGRAM
            ),
            padding := family(
                name=PREFIX + "padding_ratio",
                description="Padded tokens / all tokens of an executed batch",
                kind=family.HISTOGRAM,
            ),
            tokens := family(name=PREFIX + "tokens_total", description="Real tokens processed", kind=family.COUNTER),
            truncated := family(
                name=PREFIX + "truncated_total", description="Texts truncated to the max length", kind=family.COUNTER
            ),
            failures := family(
                name=PREFIX + "failures_total", description="Rejected or failed requests by reason", kind=family.COUNTER
            ),
        ]
        self.recorder = Recorder()
        labels = {"model": model}

        def child(fam: Any, **kwargs: Any) -> Later:
            return Later(fam.Metric(**kwargs), self.recorder)

        self.request = child(request, labels=labels, buckets=LATENCY_BUCKETS)
        self.stage = {s: child(stage, labels={**labels, "stage": s}, buckets=LATENCY_BUCKETS) for s in stages}
        self.batch_size = child(batch, labels=labels, buckets=BATCH_BUCKETS)
        self.padding_ratio = child(padding, labels=labels, buckets=RATIO_BUCKETS)
        self.tokens = child(tokens, labels=labels)
        self.truncated = child(truncated, labels=labels)
        self.failures = {r: child(failures, labels={**labels, "reason": r}) for r in REASONS}

    def close(self) -> None:
        """Record every queued update (the model's finalize calls this before Triton drops the families)."""
        self.recorder.close()
