"""Per-step accounting: HDR latency histograms, outcomes by status, and the step summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
OK = "ok"

# Microsecond resolution from 1 us to 10 min with 3 significant digits (0.1% value error).
_LOWEST_US = 1
_HIGHEST_US = 600_000_000
_SIGNIFICANT = 3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(_LOWEST_US, _HIGHEST_US, _SIGNIFICANT)


def record_seconds(histogram: HdrHistogram, seconds: float) -> None:
    """Record a duration; values beyond the trackable range are clamped, never dropped."""
    us = int(round(seconds * 1e6))
    histogram.record_value(min(max(us, _LOWEST_US), _HIGHEST_US))


@dataclass(frozen=True)
class LatencySummary:
    """Milliseconds. `percentiles` maps e.g. 99.0 to the p99."""

    count: int
    mean_ms: float
    min_ms: float
    max_ms: float
    stddev_ms: float
    percentiles: dict[float, float]

    def at(self, percentile: float) -> float:
        return self.percentiles[percentile]

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "count": self.count,
            "mean_ms": self.mean_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "stddev_ms": self.stddev_ms,
        }
        out.update({percentile_key(p): v for p, v in self.percentiles.items()})
        return out


def percentile_key(p: float) -> str:
    """50.0 -> 'p50_ms', 99.9 -> 'p99.9_ms'."""
    return f"p{p:g}_ms"


def summarize(histogram: HdrHistogram, percentiles: tuple[float, ...] = PERCENTILES) -> LatencySummary:
    count = histogram.get_total_count()
    if count == 0:
        nan = float("nan")
        return LatencySummary(0, nan, nan, nan, nan, {p: nan for p in percentiles})
    values = histogram.get_percentile_to_value_dict(list(percentiles))
    return LatencySummary(
        count=count,
        mean_ms=histogram.get_mean_value() / 1e3,
        min_ms=histogram.get_min_value() / 1e3,
        max_ms=histogram.get_max_value() / 1e3,
        stddev_ms=histogram.get_stddev() / 1e3,
        percentiles={p: values[p] / 1e3 for p in percentiles},
    )


@dataclass
class StepRecorder:
    """Collects one step's requests. Every sent request ends as exactly one outcome."""

    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    latency: HdrHistogram = field(default_factory=new_histogram)
    send_lag: HdrHistogram = field(default_factory=new_histogram)

    def on_sent(self, lag_s: float | None = None) -> None:
        self.sent += 1
        if lag_s is not None:
            record_seconds(self.send_lag, max(lag_s, 0.0))

    def on_done(self, outcome: str, latency_s: float) -> None:
        """Latency of successful requests only goes into the histogram; failures are counted by status."""
        self.outcomes[outcome] += 1
        if outcome == OK:
            record_seconds(self.latency, latency_s)

    @property
    def completed(self) -> int:
        return self.outcomes[OK]

    @property
    def failed(self) -> int:
        return sum(n for outcome, n in self.outcomes.items() if outcome != OK)

    @property
    def in_flight(self) -> int:
        return self.sent - self.completed - self.failed


@dataclass(frozen=True)
class StepResult:
    """The figures of one measured step (one concurrency level or one arrival rate)."""

    mode: str
    load: float
    duration_s: float
    sent: int
    completed: int
    failed: int
    failures: dict[str, int]
    latency: LatencySummary
    send_lag: LatencySummary | None
    server: dict[str, dict[str, float]]

    @property
    def throughput(self) -> float:
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def error_rate(self) -> float:
        return self.failed / self.sent if self.sent else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "load": self.load,
            "duration_s": self.duration_s,
            "sent": self.sent,
            "completed": self.completed,
            "failed": self.failed,
            "failures": dict(self.failures),
            "throughput_rps": self.throughput,
            "latency": self.latency.as_dict(),
            "send_lag": self.send_lag.as_dict() if self.send_lag else None,
            "server": self.server,
        }


def finish_step(
    recorder: StepRecorder,
    mode: str,
    load: float,
    duration_s: float,
    server: dict[str, dict[str, float]] | None = None,
) -> StepResult:
    if recorder.in_flight != 0:
        raise AssertionError(f"{recorder.in_flight} requests unaccounted for (sent {recorder.sent})")
    return StepResult(
        mode=mode,
        load=load,
        duration_s=duration_s,
        sent=recorder.sent,
        completed=recorder.completed,
        failed=recorder.failed,
        failures={k: v for k, v in sorted(recorder.outcomes.items()) if k != OK},
        latency=summarize(recorder.latency),
        send_lag=summarize(recorder.send_lag) if mode == "open" else None,
        server=server or {},
    )
