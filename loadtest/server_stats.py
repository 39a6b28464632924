"""Server-side breakdown of a step: deltas of Triton's cumulative statistics API, per model.

Triton reports, per model, cumulative counts and nanoseconds for the request phases (queue, compute input,
compute infer, compute output) and success. The difference between a snapshot before and after a step,
divided by the requests in it, is where the server spent each request's time; for an ensemble the composing
models appear separately, which is the per-stage view (tokenizer vs bert).
"""

from __future__ import annotations

from typing import Any

PHASES = ("queue", "compute_input", "compute_infer", "compute_output")

Snapshot = dict[str, dict[str, int]]


def snapshot(statistics: dict[str, Any]) -> Snapshot:
    """Flatten a get_inference_statistics JSON answer to {model: {counter: int}}."""
    out: Snapshot = {}
    for model in statistics.get("model_stats", []):
        stats = model.get("inference_stats", {})
        flat = {
            "inference_count": int(model.get("inference_count", 0)),
            "execution_count": int(model.get("execution_count", 0)),
            "success_count": int(stats.get("success", {}).get("count", 0)),
            "success_ns": int(stats.get("success", {}).get("ns", 0)),
            "fail_count": int(stats.get("fail", {}).get("count", 0)),
        }
        for phase in PHASES:
            flat[f"{phase}_ns"] = int(stats.get(phase, {}).get("ns", 0))
        total = out.setdefault(model["name"], dict.fromkeys(flat, 0))  # versions of one model are summed
        for k, v in flat.items():
            total[k] += v
    return out


def breakdown(before: Snapshot, after: Snapshot) -> dict[str, dict[str, float]]:
    """Per model that served requests during the step: mean microseconds per request in each phase."""
    result: dict[str, dict[str, float]] = {}
    for model, end in after.items():
        start = before.get(model, {})
        delta = {k: v - start.get(k, 0) for k, v in end.items()}
        requests = delta["success_count"]
        if requests <= 0 and delta["fail_count"] <= 0:
            continue
        per = max(requests, 1)
        row = {f"{phase}_us": delta[f"{phase}_ns"] / per / 1e3 for phase in PHASES}
        row["total_us"] = delta["success_ns"] / per / 1e3
        row["requests"] = float(requests)
        row["failed"] = float(delta["fail_count"])
        executions = delta["execution_count"]
        row["avg_batch"] = delta["inference_count"] / executions if executions > 0 else 0.0
        result[model] = row
    return result
