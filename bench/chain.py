"""The GPU chain side by side in one process: each exported repository's served ``bert`` package (fp16 untuned,
fp16 autotuned, fp8, ...) timed at the same shapes, with what its export measured.

    python -m bench.chain --repositories fp16=build/r1,fp16-tuned=build/r2,fp8=build/r3 --shapes 1x128,32x128

Each time is a median of CUDA-graph replays (the served runtime replays graphs too), the variants interleaved
round by round with the order rotated, so that drift falls on all alike. Beside each: the ratio of its sequences
per second to the first variant's, the cosine of its outputs against the first's on the same inputs, and from
its manifest the export's accuracy (minimum cosine against eager fp32), retrieval agreement and tuning seconds.
Writes ``chain.json`` under ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.quant_probe import graph_ms
from serving.repository.artifacts import AOTI, load_module
from serving.repository.manifest import read

log = logging.getLogger(__name__)


def _shapes(spec: str) -> list[tuple[int, int]]:
    return [(int(b), int(s)) for b, s in (part.split("x") for part in spec.split(","))]


def _variants(spec: str) -> dict[str, Path]:
    return {label: Path(path) for label, path in (part.split("=", 1) for part in spec.split(","))}


def export_facts(model_dir: Path) -> dict[str, Any]:
    """What the export measured for the served package: precision, gates, tuning."""
    m = read(model_dir)
    accuracy = m.get("accuracy", {})
    retrieval = accuracy.get("retrieval") or {}
    tuning = m.get("autotune") or {}
    return {
        "precision": m.get("precision"),
        "recipe": m.get("recipe"),
        "min_cosine_vs_fp32": (accuracy.get(AOTI) or {}).get("min_cosine"),
        "retrieval": {k: retrieval.get(k) for k in ("nn_agreement", "recall_at_10", "min_cosine") if k in retrieval},
        "tuned": bool(tuning.get("ran")),
        "tuning_s": tuning.get("seconds"),
        "tuned_for": tuning.get("tuned_for"),
        "export_steps_s": (m.get("compile_report") or {}).get("steps_seconds"),
    }


def run(variants: dict[str, Path], shapes: list[tuple[int, int]], rounds: int) -> dict[str, Any]:
    models = {}
    for label, repo in variants.items():
        manifest = read(repo / "bert")
        models[label] = load_module(AOTI, repo / "bert" / manifest["artifacts"][AOTI]["file"], "cuda", cuda_graphs=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = {
        (b, s): (
            torch.randint(1000, 20000, (b, s), device="cuda", generator=gen),
            torch.ones(b, s, dtype=torch.long, device="cuda"),
        )
        for b, s in shapes
    }
    samples: dict[tuple[str, tuple[int, int]], list[float]] = {(v, shape): [] for v in models for shape in shapes}
    labels = list(models)
    with torch.inference_mode():
        for r in range(rounds):
            for shape in shapes:
                ids, mask = inputs[shape]
                for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                    model = models[label]
                    samples[(label, shape)].append(
                        graph_ms(lambda m=model, i=ids, a=mask: m(i, a), reps=10, replays=20)
                    )
            log.info("round %d/%d", r + 1, rounds)
        first = labels[0]
        cosines = {}
        for label, model in models.items():
            worst = 1.0
            for ids, mask in inputs.values():
                worst = min(
                    worst, F.cosine_similarity(model(ids, mask).float(), models[first](ids, mask).float()).min().item()
                )
            cosines[label] = worst
    table = []
    for b, s in shapes:
        base = statistics.median(samples[(first, (b, s))])
        for label in labels:
            ms = statistics.median(samples[(label, (b, s))])
            table.append(
                {
                    "variant": label,
                    "batch": b,
                    "seq": s,
                    "ms": round(ms, 4),
                    "seq_per_s": round(b / ms * 1e3),
                    "speedup": round(base / ms, 3),
                    "rounds": [round(x, 4) for x in samples[(label, (b, s))]],
                }
            )
    return {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "table": table,
        "cosine_vs_first": cosines,
        "exports": {label: export_facts(repo / "bert") for label, repo in variants.items()},
    }


def markdown(result: dict[str, Any]) -> str:
    labels = list(result["exports"])
    lines = [f"{result['device']}, torch {result['torch']}", "", "| shape | " + " | ".join(labels) + " |"]
    lines.append("|---" * (len(labels) + 1) + "|")
    shapes = list(dict.fromkeys((row["batch"], row["seq"]) for row in result["table"]))
    for b, s in shapes:
        cells = {row["variant"]: row for row in result["table"] if (row["batch"], row["seq"]) == (b, s)}
        lines.append(
            f"| {b} x {s} | "
            + " | ".join(
                f"{cells[v]['ms']:.3f} ms, {cells[v]['seq_per_s']:,}/s ({cells[v]['speedup']:.2f}x)" for v in labels
            )
            + " |"
        )
    for label, facts in result["exports"].items():
        lines.append(f"- {label}: {json.dumps(facts)}; cosine vs {labels[0]} {result['cosine_vs_first'][label]:.5f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repositories", required=True, help="label=repository,... (the first is the baseline)")
    parser.add_argument("--shapes", default="1x128,32x128,128x128", help="batch x tokens, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output-dir", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    result = run(_variants(args.repositories), _shapes(args.shapes), args.rounds)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "chain.json").write_text(json.dumps(result, indent=2))
    sys.stdout.write(markdown(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
