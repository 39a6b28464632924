"""Where a served request's time goes: perf_analyzer's client/server split beside each model's own timing.

perf_analyzer's CSV splits its mean latency into client send, network + the server's frontend, and the server's
queue / compute input / compute infer / compute output of the model it calls. Triton's metrics port gives the
same server split for every model (the ensemble's steps too), and our models time their own ``execute()``
(``bertserve_request_duration_seconds``) and its stages. Scraped before and after one perf_analyzer step, the
differences give per-request means (summaries' and histograms' sum / count), so that a model's compute infer
minus its execute time is what the Python backend's round trip to the stub costs.
"""

from __future__ import annotations

import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Triton's per-request summaries (µs; the launcher turns them on with --metrics-config=summary_latencies=true).
TRITON_SUMMARIES = {
    "nv_inference_request_summary_us": "request",
    "nv_inference_queue_summary_us": "queue",
    "nv_inference_compute_input_summary_us": "compute_input",
    "nv_inference_compute_infer_summary_us": "compute_infer",
    "nv_inference_compute_output_summary_us": "compute_output",
}
EXECUTE = "bertserve_request_duration_seconds"
STAGE = "bertserve_stage_duration_seconds"
BATCH = "bertserve_batch_size"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def scrape(metrics_url: str, timeout_s: float = 5.0) -> Samples:
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=timeout_s) as r:
        return parse(r.read().decode("utf-8"))


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """The summed change of every sample called ``name`` whose labels include ``labels``."""
    total = 0.0
    for (n, lbls), value in after.items():
        if n == name and labels.items() <= dict(lbls).items():
            total += value - before.get((n, lbls), 0.0)
    return total


def _mean(before: Samples, after: Samples, histogram: str, scale: float, **labels: str) -> float | None:
    count = _delta(before, after, histogram + "_count", **labels)
    return scale * _delta(before, after, histogram + "_sum", **labels) / count if count > 0 else None


def model_split(before: Samples, after: Samples) -> dict[str, dict[str, Any]]:
    """Per model that served requests between the scrapes: Triton's means per request and our execute() times, µs."""
    requests = "nv_inference_request_summary_us_count"
    models = sorted({dict(lbls)["model"] for (n, lbls) in after if n == requests})
    split: dict[str, dict[str, Any]] = {}
    for model in models:
        count = _delta(before, after, requests, model=model)
        if count <= 0:
            continue
        triton = {k: _mean(before, after, n, 1.0, model=model) for n, k in TRITON_SUMMARIES.items()}
        entry: dict[str, Any] = {"requests": count, "triton_us": {k: v for k, v in triton.items() if v is not None}}
        execute = _mean(before, after, EXECUTE, 1e6, model=model)
        if execute is not None:
            entry["execute_us"] = execute
            stages = {s: _mean(before, after, STAGE, 1e6, model=model, stage=s) for s in _stages(after, model)}
            entry["stage_us_per_batch"] = {s: v for s, v in stages.items() if v is not None}
            rows = _mean(before, after, BATCH, 1.0, model=model)
            if rows is not None:
                entry["rows_per_batch"] = rows
        split[model] = entry
    return split


def _stages(samples: Samples, model: str) -> list[str]:
    labels = [dict(lbls) for (n, lbls) in samples if n == STAGE + "_count"]
    return sorted({lbls["stage"] for lbls in labels if lbls.get("model") == model})


def describe(step: dict[str, Any]) -> list[str]:
    """Markdown lines for one perf_analyzer step (its CSV split and the per-model split)."""
    pa = step.get("split_us", {})
    lines = [f"Where the time goes at concurrency {step['concurrency']} (means, µs):", ""]
    if pa:
        lines.append("- perf_analyzer: " + ", ".join(f"{k} {v:.0f}" for k, v in pa.items()))
    for model, e in step.get("models", {}).items():
        t = e["triton_us"]
        line = f"- {model}: Triton " + ", ".join(f"{k} {v:.0f}" for k, v in t.items())
        if "execute_us" in e:
            stages = ", ".join(f"{k} {v:.0f}" for k, v in e["stage_us_per_batch"].items())
            line += f"; execute() {e['execute_us']:.0f} ({stages} per batch)"
            if "rows_per_batch" in e:
                line += f"; {e['rows_per_batch']:.1f} rows per batch"
            if "compute_infer" in t:
                line += f"; compute infer outside execute() {t['compute_infer'] - e['execute_us']:.0f}"
        lines.append(line)
    return lines + [""]
