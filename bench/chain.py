"""The GPU chain side by side in one process: each exported repository's served ``bert`` package (fp16 untuned,
fp16 autotuned, fp8, ...) timed at the same shapes, with what its export measured.

    python -m bench.chain --repositories fp16=build/r1,fp16-tuned=build/r2,fp8=build/r3 --shapes 1x128,32x128
    python -m bench.chain --build fp16,fp8,fp8-ffn --model bert-base   # compiled here, gates aside

Each time is a median of CUDA-graph replays (the served runtime replays graphs too), the variants interleaved
round by round with the order rotated, so that drift falls on all alike. Beside each: the ratio of its sequences
per second to the first variant's, the cosine of its outputs against the first's on the same inputs, and from
its manifest the export's accuracy (minimum cosine against eager fp32), retrieval agreement and tuning seconds.
Writes ``chain.json`` under ``--output-dir``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.quant_probe import graph_ms
from serving.contract.artifacts import AOTI, load_module
from serving.contract.manifest import read

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


def from_repositories(variants: dict[str, Path]) -> dict[str, Callable[..., torch.Tensor]]:
    models = {}
    for label, repo in variants.items():
        manifest = read(repo / "bert")
        models[label] = load_module(AOTI, repo / "bert" / manifest["artifacts"][AOTI]["file"], "cuda", cuda_graphs=True)
    return models


def _fp16(encoder: torch.nn.Module) -> torch.nn.Module:
    from export import fusion

    module = copy.deepcopy(encoder).half()
    fusion.fuse_gelu_epilogues(module)
    return module


def _runner(model: Callable[..., torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``model`` as the accuracy gates call it: CPU ids and mask in, float32 embeddings on the CPU out."""

    def run(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return model(ids.cuda(), mask.cuda()).float().cpu()

    return run


def built(model: str, precisions: list[str], work: Path) -> tuple[dict[str, Callable[..., torch.Tensor]], dict]:
    """Each precision's package compiled here as export compiles it, its gates aside: what a precision would gain
    whether or not export lets it ship; and its retrieval figures against eager fp32 (export/verify.py)."""
    from export import artifacts, checkpoint, fp8
    from export.encoder import Encoder
    from export.verify import Verifier

    ckpt = checkpoint.load(model)
    encoder = Encoder(ckpt.model).cuda().eval()
    modules = {
        "fp16": lambda: _fp16(encoder),
        "fp8": lambda: fp8.quantize(copy.deepcopy(encoder)),
        "fp8-ffn": lambda: fp8.quantize(copy.deepcopy(encoder), fp8.ffn_only),
    }

    verifier = Verifier(_runner(encoder), ckpt.tokenizer, 128, batch=8, max_batch=128)
    work.mkdir(parents=True, exist_ok=True)
    models, gates = {}, {}
    for p in precisions:
        path = work / f"{p}.pt2"
        artifacts.compile_aoti(artifacts.export_program(modules[p](), "cuda", 128, 128), path)
        models[p] = load_module(AOTI, path, "cuda", cuda_graphs=True)
        runner = _runner(models[p])
        gates[p] = {"sentences": verifier.score(runner).as_dict(), "retrieval": verifier.retrieval(runner).as_dict()}
        log.info("%s: %s", p, gates[p])
    return models, gates


def run(models: dict[str, Callable[..., torch.Tensor]], shapes: list[tuple[int, int]], rounds: int) -> dict[str, Any]:
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
                got, want = model(ids, mask).float(), models[first](ids, mask).float()
                worst = min(worst, F.cosine_similarity(got, want).min().item())
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
    }


def markdown(result: dict[str, Any]) -> str:
    labels = list(result["cosine_vs_first"])
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
    for label, cosine in result["cosine_vs_first"].items():
        facts = result.get("exports", {}).get(label)
        lines.append(f"- {label}: cosine vs {labels[0]} {cosine:.5f}" + (f"; {json.dumps(facts)}" if facts else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--repositories", help="label=repository,... (the first is the baseline)")
    source.add_argument("--build", help="precisions to compile here from --model, gates aside (fp16,fp8)")
    parser.add_argument("--model", default="bert-base", help="the checkpoint --build compiles (export's --model)")
    parser.add_argument("--shapes", default="1x128,32x128,128x128", help="batch x tokens, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output-dir", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.repositories:
        variants = _variants(args.repositories)
        result = run(from_repositories(variants), _shapes(args.shapes), args.rounds)
        result["exports"] = {label: export_facts(repo / "bert") for label, repo in variants.items()}
    else:
        models, gates = built(args.model, args.build.split(","), args.output_dir / "chain-packages")
        result = {**run(models, _shapes(args.shapes), args.rounds), "exports": gates}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "chain.json").write_text(json.dumps(result, indent=2))
    sys.stdout.write(markdown(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
