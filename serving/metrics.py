"""Every custom metric the models export, declared once (names carry the project prefix and unit suffix).

The families are created through ``pb_utils.MetricFamily`` and appear on Triton's metrics port (:8002).
Keep the returned object alive for the model's lifetime: Triton drops a family whose Python object dies.
"""

from __future__ import annotations

from typing import Any

PREFIX = "bertserve_"
# 50 µs .. 1 s, geometric-ish, with a boundary at exactly 10 ms (the latency SLO).
LATENCY_BUCKETS = [
    0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0,
]  # fmt: skip
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
    "internal",
)


class ModelMetrics:
    """The metric children of one model, with labels bound once."""

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
        labels = {"model": model}
        self.request = request.Metric(labels=labels, buckets=LATENCY_BUCKETS)
        self.stage = {s: stage.Metric(labels={**labels, "stage": s}, buckets=LATENCY_BUCKETS) for s in stages}
        self.batch_size = batch.Metric(labels=labels, buckets=BATCH_BUCKETS)
        self.padding_ratio = padding.Metric(labels=labels, buckets=RATIO_BUCKETS)
        self.tokens = tokens.Metric(labels=labels)
        self.truncated = truncated.Metric(labels=labels)
        self.failures = {r: failures.Metric(labels={**labels, "reason": r}) for r in REASONS}
