"""Which Linears lose retrieval under int8? ``python -m export.sensitivity`` quantizes one group at a time.

For an int8 recipe's fp32 rewrite (smoothing, outlier splits), each group of Linears (one encoder layer, or one
projection class across the layers) is quantized alone with the recipe's int8 GEMMs while every other Linear
stays fp32 (``--rest bf16``: bf16, as the mixed recipe runs them); each row is scored on the retrieval set against
eager fp32 (export.verify), as the retrieval gate scores a whole model. A group given as ``query+key`` is the union;
``none`` quantizes nothing (with ``--rest bf16``: every Linear bf16). ``--keep-fp32`` scores the recipe with those
groups left fp32 instead. Writes the table as Markdown (and JSON beside it) under ``--output-dir``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from export import checkpoint, quantize
from export.encoder import Encoder
from export.verify import Retrieval, Verifier, calibration_batches

log = logging.getLogger(__name__)

CLASSES = {
    "query": ".attention.self.query",
    "key": ".attention.self.key",
    "value": ".attention.self.value",
    "attention output": ".attention.output.dense",
    "FFN in (intermediate)": ".intermediate.dense",
    "FFN out": ".output.dense",
}


def groups(names: list[str], layers: int) -> dict[str, set[str]]:
    """Group name -> the quantizable Linears in it: every layer, then every projection class, then all."""
    out = {f"layer {i}": {n for n in names if f".layer.{i}." in n} for i in range(layers)}
    for label, suffix in CLASSES.items():
        bases = {n: quantize.base_name(n) for n in names}
        out[label] = {n for n, b in bases.items() if b.endswith(suffix) and not b.endswith(".attention" + suffix)}
    out["all"] = set(names)
    out["none"] = set()
    return out


def union(table: dict[str, set[str]], spec: str) -> set[str]:
    """The Linears of ``a+b+...``, each a group name of ``table``."""
    return set().union(*(table[g] for g in spec.split("+")))


def rewritten(encoder: nn.Module, calibration: quantize.Calibration, alpha: float, outliers: int) -> nn.Module:
    """The torchao smoothquant recipe's fp32 rewrite (SmoothQuant everywhere but the FFN outputs, which split)."""
    model = copy.deepcopy(encoder).eval()
    with torch.no_grad():
        return quantize.smooth_and_split(model, calibration, alpha=alpha, outlier_channels=outliers)


def int8_linears(model: nn.Module) -> list[str]:
    """The Linears that carry the int8 GEMMs after a rewrite (a split's fp32 outlier part is no Linear)."""
    return list(quantize._quantizable_linears(model))


def score(
    verifier: Verifier,
    base: nn.Module,
    targets: set[str],
    runner: Callable[[nn.Module], object],
    asymmetric: bool,
    rest_bf16: bool = False,
) -> tuple[Retrieval, float]:
    model = copy.deepcopy(base)
    with torch.no_grad():
        if rest_bf16:
            for name, linear in quantize._quantizable_linears(model).items():
                if name not in targets:
                    quantize.replace_submodule(model, name, quantize.Bf16Linear(linear))
        quantize._torchao_int8(model, targets, asymmetric=frozenset(targets) if asymmetric else frozenset())
    start = time.perf_counter()
    result = verifier.retrieval(runner(model.eval()))
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.sensitivity", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--alpha", type=float, default=quantize.SMOOTHQUANT_ALPHA)
    parser.add_argument("--outliers", type=int, default=quantize.OUTLIER_CHANNELS)
    parser.add_argument(
        "--symmetric", action="store_true", help="symmetric per-token activations (the recipe's are asymmetric)"
    )
    parser.add_argument("--only", default="", help="comma-separated group names to score (default: every group)")
    parser.add_argument("--rest", choices=("fp32", "bf16"), default="fp32", help="what the other Linears run in")
    parser.add_argument("--keep-fp32", default="", help="comma-separated groups left fp32; scores the rest int8")
    parser.add_argument("--output-dir", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from export.pipeline import _eager_runner

    ckpt = checkpoint.load(args.model)
    max_seq = ckpt.max_seq(None)
    encoder = Encoder(ckpt.model).eval()
    verifier = Verifier(_eager_runner(encoder, "cpu"), ckpt.tokenizer, max_seq, max_batch=32)
    base = rewritten(encoder, calibration_batches(ckpt.tokenizer, max_seq), args.alpha, args.outliers)
    names = int8_linears(base)
    table = groups(names, ckpt.model.config.num_hidden_layers)
    rows = []
    if args.keep_fp32:
        kept = set().union(*(union(table, g) for g in args.keep_fp32.split(",")))
        chosen = {f"all but {args.keep_fp32}": set(names) - kept}
    else:
        chosen = {g: union(table, g) for g in (args.only.split(",") if args.only else table)}
    for label, targets in chosen.items():
        run = functools.partial(_eager_runner, device="cpu")
        result, seconds = score(verifier, base, targets, run, not args.symmetric, args.rest == "bf16")
        log.info("%s (%d Linears int8): %s, %.0f s", label, len(targets), result, seconds)
        rows.append({"int8": label, "linears": len(targets), **result.as_dict()})
    args.output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"sensitivity-{'sym' if args.symmetric else 'asym'}-a{args.alpha}-k{args.outliers}-rest-{args.rest}"
    stem += "-keep-" + args.keep_fp32 if args.keep_fp32 else ""
    stem = stem.replace(",", "+").replace(" ", "_")
    (args.output_dir / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        f"| int8 (the rest {args.rest}) | Linears | nn agreement | recall@10 | min cosine |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {r['int8']} | {r['linears']} | {r['nn_agreement']:.4f} | {r['recall_at_10']:.4f} | "
            f"{r['min_cosine']:.5f} |"
            for r in rows
        ),
    ]
    (args.output_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    log.info("\n%s", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
