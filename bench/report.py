"""The benchmark report: machine facts, per-cell results with ratios, JSON and markdown files."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import torch

from bench.stats import speedups, summarise
from bench.table import full_table, overview, variants_table
from bench.timing import Cell
from serving.contract.hardware import cpu_model


def machine(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "loadavg": list(os.getloadavg()),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["cuda"] = torch.version.cuda
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return info


def cell_rows(cells: list[Cell]) -> list[dict[str, Any]]:
    """One dict per timed cell, with the speed-up over the best fp32 variant at the same shape."""
    rows = []
    for c in cells:
        if not c.samples:
            continue
        stats = summarise(c.samples, c.shape[0])
        rows.append(
            {
                "variant": c.variant.name,
                "precision": c.variant.precision,
                "batch": c.shape[0],
                "seq": c.shape[1],
                **stats.as_dict(),
                "min_cosine": None if c.min_cosine is None else round(c.min_cosine, 6),
                "peak_mib": None if c.peak_mib is None else round(c.peak_mib, 1),
                "calls_per_round": c.calls,
            }
        )
    for shape in {(r["batch"], r["seq"]) for r in rows}:
        at = [r for r in rows if (r["batch"], r["seq"]) == shape]
        fp32 = [r["variant"] for r in at if r["precision"] == "fp32"]
        ratios = speedups({r["variant"]: r["median_ms"] for r in at}, fp32)
        for r in at:
            r["speedup"] = round(ratios[r["variant"]], 3) if r["variant"] in ratios else None
    return rows


def markdown_report(report: dict[str, Any]) -> str:
    m, cfg = report["machine"], report["config"]
    where = m.get("gpu") or m["cpu"]
    lines = [
        f"# bench-{cfg['device']}",
        "",
        f"{where}; {m['cpu']} ({m['cpu_capability']}, {m['torch_threads']} torch threads); torch {m['torch']}; "
        f"model {report['model']}; load average at start {m['loadavg'][0]:.2f}.",
        "",
        "Median ms per call (speed-up over the best fp32 variant at that shape):",
        "",
        overview(report["cells"], [v["name"] for v in report["variants"]]),
        "",
        full_table(report["cells"]),
        "",
        variants_table(report["variants"]),
    ]
    if report["skipped"]:
        lines += ["", "Not timed: " + "; ".join(f"{s['name']}: {s['reason']}" for s in report["skipped"]) + "."]
    return "\n".join(lines) + "\n"


def write(report: dict[str, Any], output_dir: Path) -> tuple[Path, Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{report['config']['device']}"
    json_path, md_path = output_dir / f"{stem}.json", output_dir / f"{stem}.md"
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    md_path.write_text(markdown_report(report))
    return json_path, md_path
