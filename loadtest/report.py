"""Reports of a run: console table, JSON, CSV (perf_analyzer-like columns) and a PNG plot with the budget."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any, TextIO

from loadtest.server_stats import PHASES
from loadtest.stats import PERCENTILES, StepResult, percentile_key

logger = logging.getLogger(__name__)


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if value != value else f"{value:.{digits}f}"  # NaN prints as "-"


def server_totals(step: StepResult, model: str) -> dict[str, float]:
    """Server time per request in each phase for the model under test.

    For an ensemble the composing models that served the step are summed: the ensemble's own statistics
    add up their compute phases but not the time their requests waited in each composing model's queue.
    """
    rows = step.server
    parts = [row for name, row in rows.items() if name != model]
    if not parts:
        return rows.get(model, {})
    return {f"{p}_us": sum(r[f"{p}_us"] for r in parts) for p in PHASES}


def stage_lines(step: StepResult, model: str) -> list[str]:
    """One line per model that served the step, when there is more than one (ensemble stages)."""
    if len(step.server) < 2:
        return []
    lines = []
    for name, row in step.server.items():
        phases = " ".join(f"{p}={row[f'{p}_us'] / 1e3:.2f}" for p in PHASES)
        lines.append(f"  load {step.load:g} {name}: {phases} ms, avg batch {row['avg_batch']:.2f}")
    return lines


def console_table(steps: list[StepResult], model: str, out: TextIO) -> None:
    load = "conc" if steps and steps[0].mode == "closed" else "rate/s"
    header = [load, "sent", "ok", "failed", "req/s", "mean", *(f"p{p:g}" for p in PERCENTILES), "max"]
    header += ["lag p99", "queue", "c.in", "infer", "c.out"]
    rows = []
    for s in steps:
        lat = s.latency
        srv = server_totals(s, model)
        lag = _fmt(s.send_lag.at(99.0)) if s.send_lag else "-"
        rows.append(
            [f"{s.load:g}", str(s.sent), str(s.completed), str(s.failed), _fmt(s.throughput, 1), _fmt(lat.mean_ms)]
            + [_fmt(lat.at(p)) for p in PERCENTILES]
            + [_fmt(lat.max_ms), lag]
            + [_fmt(srv.get(f"{p}_us", float("nan")) / 1e3) for p in PHASES]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    out.write("latency ms (client); lag = open-loop send lag ms; queue..c.out = server ms per request\n")
    out.write("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)) + "\n")
    for r in rows:
        out.write("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + "\n")
    for s in steps:
        for line in stage_lines(s, model):
            out.write(line + "\n")
        if s.failures:
            out.write(f"failures at load {s.load:g}: " + ", ".join(f"{k}={v}" for k, v in s.failures.items()) + "\n")


def write_json(path: Path, config: dict[str, Any], steps: list[StepResult], extra: dict[str, Any]) -> None:
    doc = {"config": config, "steps": [s.as_dict() for s in steps], **extra}
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")


def write_csv(path: Path, steps: list[StepResult], model: str) -> None:
    """One row per step; latency columns in microseconds as perf_analyzer's -f CSV has them."""
    columns = ["Mode", "Load", "Sent", "Completed", "Failed", "Inferences/Second", "Avg latency"]
    columns += [f"p{p:g} latency" for p in PERCENTILES] + ["Max latency", "Send lag p99"]
    columns += ["Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output"]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for s in steps:
            srv = server_totals(s, model)
            lat = s.latency
            writer.writerow(
                [s.mode, f"{s.load:g}", s.sent, s.completed, s.failed, f"{s.throughput:.2f}", _us(lat.mean_ms)]
                + [_us(lat.at(p)) for p in PERCENTILES]
                + [_us(lat.max_ms), _us(s.send_lag.at(99.0)) if s.send_lag else ""]
                + [f"{srv.get(f'{p}_us', 0.0):.0f}" for p in PHASES]
            )


def _us(ms: float) -> str:
    return "" if ms != ms else f"{ms * 1e3:.0f}"


def write_plot(path: Path, steps: list[StepResult], budget_ms: float, title: str) -> bool:
    """Latency percentiles and throughput against load, with the budget drawn; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed; skipping the plot")
        return False
    loads = [s.load for s in steps]
    fig, (ax_lat, ax_tput) = plt.subplots(1, 2, figsize=(12, 4.5))
    for p in (50.0, 90.0, 99.0, 99.9):
        ax_lat.plot(loads, [s.latency.at(p) for s in steps], marker="o", label=percentile_key(p).removesuffix("_ms"))
    ax_lat.axhline(budget_ms, color="red", linestyle="--", label=f"budget {budget_ms:g} ms")
    ax_tput.plot(loads, [s.throughput for s in steps], marker="o", color="tab:green")
    xlabel = "concurrency" if steps and steps[0].mode == "closed" else "offered rate (req/s)"
    for ax in (ax_lat, ax_tput):
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
        if len(loads) > 1 and max(loads) / min(loads) >= 8:
            ax.set_xscale("log", base=2)
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_yscale("log")
    ax_lat.legend()
    ax_tput.set_ylabel("completed req/s")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
