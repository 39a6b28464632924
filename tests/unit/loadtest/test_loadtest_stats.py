"""Percentile math of the HDR histograms against distributions whose quantiles are known exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadtest.stats import PERCENTILES, StepRecorder, finish_step, new_histogram, record_seconds, summarize


def test_uniform_integers_give_exact_quantiles() -> None:
    histogram = new_histogram()
    for us in range(1, 100_001):  # 1 us .. 100 ms, each once: the q-quantile is q * 100 ms
        histogram.record_value(us)
    summary = summarize(histogram)
    assert summary.count == 100_000
    for p in PERCENTILES:
        assert summary.at(p) == pytest.approx(p / 100 * 100.0, rel=1e-3)  # 3 significant digits
    assert summary.mean_ms == pytest.approx(50.0, rel=1e-3)
    assert summary.max_ms == pytest.approx(100.0, rel=1e-3)


def test_exponential_latencies_match_theoretical_quantiles() -> None:
    mean_s = 0.004
    samples = np.random.default_rng(7).exponential(mean_s, size=200_000)
    histogram = new_histogram()
    for s in samples:
        record_seconds(histogram, float(s))
    summary = summarize(histogram)
    for p in (50.0, 90.0, 99.0):
        theoretical_ms = -math.log(1 - p / 100) * mean_s * 1e3
        exact_ms = float(np.percentile(samples, p)) * 1e3
        assert summary.at(p) == pytest.approx(exact_ms, rel=2e-3)
        assert summary.at(p) == pytest.approx(theoretical_ms, rel=0.03)
    assert summary.mean_ms == pytest.approx(mean_s * 1e3, rel=0.01)


def test_out_of_range_values_are_clamped_not_dropped() -> None:
    histogram = new_histogram()
    record_seconds(histogram, 0.0)
    record_seconds(histogram, 10_000.0)
    assert histogram.get_total_count() == 2


def test_empty_histogram_summarizes_to_nan() -> None:
    summary = summarize(new_histogram())
    assert summary.count == 0
    assert math.isnan(summary.at(99.0))


def test_every_request_is_accounted_for() -> None:
    recorder = StepRecorder()
    for i in range(10):
        recorder.on_sent()
        recorder.on_done("ok" if i % 3 else "unavailable", 0.002)
    step = finish_step(recorder, "closed", 1, 1.0)
    assert step.sent == step.completed + step.failed == 10
    assert step.failures == {"unavailable": 4}
    assert step.latency.count == step.completed == 6  # failures are not latency samples
    assert step.error_rate == pytest.approx(0.4)


def test_finish_step_refuses_requests_still_in_flight() -> None:
    recorder = StepRecorder()
    recorder.on_sent()
    with pytest.raises(AssertionError, match="unaccounted"):
        finish_step(recorder, "closed", 1, 1.0)
