"""Percentiles, cell statistics, speed-ups and round sizing of the benchmark."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.stats import calls_per_round, percentile, speedups, summarise


@given(st.lists(st.floats(0.0, 1e3), min_size=1, max_size=50), st.floats(0.0, 100.0))
def test_percentile_matches_numpy_linear(samples: list[float], q: float) -> None:
    assert percentile(samples, q) == pytest.approx(float(np.percentile(samples, q)), rel=1e-9, abs=1e-9)


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([], 50.0)
    with pytest.raises(ValueError):
        percentile([1.0], 101.0)


def test_summarise_reports_milliseconds_and_sequences_per_second() -> None:
    stats = summarise([0.001, 0.002, 0.003, 0.004], batch=8)
    assert stats.n == 4
    assert stats.median_ms == pytest.approx(2.5)
    assert stats.min_ms == pytest.approx(1.0)
    assert stats.mean_ms == pytest.approx(2.5)
    assert stats.throughput == pytest.approx(8 / 0.0025)
    assert stats.p99_ms == pytest.approx(3.97)


def test_speedups_are_relative_to_the_fastest_baseline() -> None:
    medians = {"eager fp32": 10.0, "aoti fp32": 5.0, "int8": 2.5, "fp16": 20.0}
    ratios = speedups(medians, ["eager fp32", "aoti fp32"])
    assert ratios == {"eager fp32": 0.5, "aoti fp32": 1.0, "int8": 2.0, "fp16": 0.25}


def test_speedups_without_a_timed_baseline_are_empty() -> None:
    assert speedups({"int8": 1.0}, ["eager fp32"]) == {}
    assert speedups({"eager fp32": math.nan, "int8": 1.0}, ["eager fp32"]) == {}


@pytest.mark.parametrize(
    ("estimate_s", "budget_ms", "max_calls", "expected"),
    [(0.001, 100.0, 200, 100), (0.5, 100.0, 200, 1), (1e-6, 100.0, 200, 200), (0.0, 100.0, 7, 7)],
)
def test_calls_per_round_fill_the_budget_within_bounds(
    estimate_s: float, budget_ms: float, max_calls: int, expected: int
) -> None:
    assert calls_per_round(estimate_s, budget_ms, max_calls) == expected
