"""Latency statistics of one (variant, shape) cell and the ratios that compare variants."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between order statistics (numpy's default)."""
    if not samples:
        raise ValueError("no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in 0..100, got {q}")
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class CellStats:
    """Timed calls of one variant at one (batch, seq); latencies in milliseconds."""

    n: int
    median_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float
    throughput: float  # sequences per second: batch / mean latency

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def summarise(latencies_s: Sequence[float], batch: int) -> CellStats:
    ms = [t * 1e3 for t in latencies_s]
    mean = sum(ms) / len(ms) if ms else float("nan")
    return CellStats(
        n=len(ms),
        median_ms=percentile(ms, 50.0),
        p99_ms=percentile(ms, 99.0),
        mean_ms=mean,
        min_ms=min(ms),
        throughput=batch * 1e3 / mean,
    )


def speedups(medians: dict[str, float], baseline: Sequence[str]) -> dict[str, float]:
    """Each variant's speed-up over the fastest baseline variant present (best median / variant median).

    Above 1 is faster than the best baseline; an empty result when no baseline variant was timed.
    """
    present = [medians[name] for name in baseline if name in medians and math.isfinite(medians[name])]
    if not present:
        return {}
    best = min(present)
    return {name: best / m for name, m in medians.items() if m > 0 and math.isfinite(m)}


def calls_per_round(estimate_s: float, budget_ms: float, max_calls: int) -> int:
    """How many calls fill one cell's budget per round: at least one, at most ``max_calls``."""
    if estimate_s <= 0 or not math.isfinite(estimate_s):
        return max_calls
    return max(1, min(max_calls, int(budget_ms / (estimate_s * 1e3))))
