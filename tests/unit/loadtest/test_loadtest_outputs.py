"""Payload pool, server-statistics deltas, Prometheus metrics and report files."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest

from loadtest.config import LoadTestConfig
from loadtest.metrics import LATENCY_BUCKETS, LoadTestMetrics
from loadtest.payload import build_pool, load_corpus, load_tokenizer, perf_analyzer_input_data
from loadtest.report import console_table, write_csv, write_json
from loadtest.server_stats import breakdown, snapshot
from loadtest.stats import StepRecorder, finish_step


def test_shipped_corpus_has_realistic_lengths() -> None:
    corpus = load_corpus()
    tokenizer = load_tokenizer(None)
    if tokenizer is None:
        pytest.skip("default tokenizer package not installed")
    lengths = np.array([len(tokenizer.encode(line).ids) for line in corpus])
    assert len(corpus) >= 300
    assert np.median(lengths) >= 20 and lengths.max() >= 100 and lengths.min() <= 8


def test_pool_is_seeded_and_repeatable() -> None:
    a = build_pool(LoadTestConfig(seed=1, pool_size=32))
    b = build_pool(LoadTestConfig(seed=1, pool_size=32))
    c = build_pool(LoadTestConfig(seed=2, pool_size=32))
    assert [p.text for p in a] == [p.text for p in b] != [p.text for p in c]
    assert a[0].arrays["TEXT"].shape == (1, 1) and a[0].arrays["TEXT"].dtype == object


def test_fixed_length_payloads_have_exactly_that_many_tokens() -> None:
    if load_tokenizer(None) is None:
        pytest.skip("default tokenizer package not installed")
    pool = build_pool(LoadTestConfig(payload="fixed", token_length=48, pool_size=8), "tokens")
    assert {p.tokens for p in pool} == {48}
    assert {p.arrays["input_ids"].shape for p in pool} == {(1, 48)}


def test_perf_analyzer_input_data_drops_the_batch_dimension() -> None:
    pool = build_pool(LoadTestConfig(pool_size=3))
    data = perf_analyzer_input_data(pool)["data"]
    assert len(data) == 3 and data[0]["TEXT"]["shape"] == [1]
    assert data[0]["TEXT"]["content"] == [pool[0].text]


def _stats(count: int, ns: int) -> dict[str, object]:
    phase = {"count": str(count), "ns": str(ns)}
    return {
        "model_stats": [
            {
                "name": "bert",
                "version": "1",
                "inference_count": str(count),
                "execution_count": str(count // 2),
                "inference_stats": {k: phase for k in ("success", "queue", "compute_infer")},
            }
        ]
    }


def test_server_breakdown_is_per_request_delta() -> None:
    rows = breakdown(snapshot(_stats(10, 1_000_000)), snapshot(_stats(110, 41_000_000)))
    assert rows["bert"]["requests"] == 100
    assert rows["bert"]["queue_us"] == pytest.approx(400.0)
    assert rows["bert"]["compute_input_us"] == 0.0
    assert rows["bert"]["avg_batch"] == pytest.approx(2.0)
    assert breakdown(snapshot(_stats(5, 1)), snapshot(_stats(5, 1))) == {}


def test_metrics_have_a_bucket_at_the_budget_and_count_outcomes() -> None:
    assert 0.01 in LATENCY_BUCKETS and LATENCY_BUCKETS[0] <= 5e-5
    metrics = LoadTestMetrics("embed", "closed")
    metrics.observe("ok", 0.004)
    metrics.observe("unavailable", 0.001)
    text = generate_latest(metrics.registry).decode()
    assert 'loadtest_request_duration_seconds_bucket{le="0.01",mode="closed",model="embed"} 1.0' in text
    assert 'loadtest_requests_total{mode="closed",model="embed",outcome="unavailable"} 1.0' in text
    assert 'loadtest_request_duration_seconds_count{mode="closed",model="embed"} 1.0' in text


def test_reports_contain_every_step(tmp_path: Path) -> None:
    steps = []
    for load in (1, 2):
        recorder = StepRecorder()
        for _ in range(20):
            recorder.on_sent()
            recorder.on_done("ok", 0.003 * load)
        steps.append(
            finish_step(
                recorder,
                "closed",
                load,
                1.0,
                {
                    "bert": {
                        "queue_us": 100.0,
                        "compute_input_us": 1.0,
                        "compute_infer_us": 2e3,
                        "compute_output_us": 5.0,
                    }
                },
            )
        )
    write_json(tmp_path / "r.json", LoadTestConfig().as_dict(), steps, {})
    write_csv(tmp_path / "r.csv", steps, "embed")
    out = io.StringIO()
    console_table(steps, "embed", out)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [s["sent"] for s in doc["steps"]] == [20, 20]
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert [float(r["p99 latency"]) for r in rows] == pytest.approx([3000.0, 6000.0], rel=1e-3)
    assert rows[0]["Server Compute Infer"] == "2000"
    assert len(out.getvalue().splitlines()) == 4
