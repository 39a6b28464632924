"""int8 for the sequence tasks (rerank, classify): the encoder's int8 recipes (export/quantize.py) applied to the
sequence classifier, gated on what its users see (export/sequence_gates.py) against fp32 on the shipped sets.

Calibration is the shipped pairs (export/data/pairs.tsv), kept apart from the gate's sets, encoded as the task
encodes them: as pairs for rerank, alone and as pairs for classify. The recipes are tried in the encoder's order
(quantize.RECIPES: the mixed int8 / bf16 recipe first where the CPU computes bf16), each on the eager model first;
one whose eager outputs pass the gate is compiled (AOTInductor, as fp32 is) and gated again as the package that
would serve, and the first package that passes ships. When none does, int8 ships no package and is not served: the
serving rule (export/serving_choice.py) picks fp32 and says why in export's log and the manifest, which records every
recipe tried with its figures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from export import quantize, sequence_gates, sequence_sets
from export.errors import AccuracyGateError, ArtifactError, ConfigError
from export.verify import pairs

log = logging.getLogger(__name__)

INT8_FILE = "model_int8.pt2"
GATE_BATCH = 8  # classify texts per forward (at most --max-batch): one short request's worth
Scorer = Callable[..., torch.Tensor]  # (input_ids, attention_mask, token_type_ids) -> scores [rows] or logits


def _forward(run: Scorer, enc) -> torch.Tensor:
    with torch.inference_mode():
        return run(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).float().cpu()


def rerank_outputs(run: Scorer, tokenizer, max_seq: int, max_batch: int) -> list[torch.Tensor]:
    """Each shipped list's scores, its pairs in forwards of at most ``max_batch`` rows, as the server runs them."""
    out = []
    for query, docs in sequence_sets.rerank_lists():
        scores = []
        for i in range(0, len(docs), max_batch):
            chunk = docs[i : i + max_batch]
            enc = tokenizer(
                [query] * len(chunk), chunk, padding=True, truncation="longest_first", max_length=max_seq,
                return_tensors="pt",
            )  # fmt: skip
            scores.append(_forward(run, enc).reshape(len(chunk)))
        out.append(torch.cat(scores))
    return out


def classify_outputs(run: Scorer, tokenizer, max_seq: int, max_batch: int) -> torch.Tensor:
    """The shipped classify texts' logits, in forwards of at most ``GATE_BATCH`` texts."""
    texts = sequence_sets.classify_texts()
    step = min(GATE_BATCH, max_batch)
    rows = []
    for i in range(0, len(texts), step):
        enc = tokenizer(texts[i : i + step], padding=True, truncation=True, max_length=max_seq, return_tensors="pt")
        rows.append(_forward(run, enc))
    return torch.cat(rows)


def calibration(tokenizer, max_seq: int, task: str) -> quantize.Calibration:
    """The shipped pairs in batches of 8 as (input_ids, attention_mask, token_type_ids): as pairs, and for classify
    each sentence alone too."""
    a, b = (list(side) for side in zip(*pairs(), strict=True))
    encodings = [tokenizer(a[i : i + 8], b[i : i + 8], truncation="longest_first", padding=True, max_length=max_seq,
                           return_tensors="pt") for i in range(0, len(a), 8)]  # fmt: skip
    if task == "classify":
        alone = a + b
        encodings += [
            tokenizer(alone[i : i + 8], truncation=True, padding=True, max_length=max_seq, return_tensors="pt")
            for i in range(0, len(alone), 8)
        ]
    return [(e["input_ids"], e["attention_mask"], e["token_type_ids"]) for e in encodings]


@dataclass(frozen=True)
class Judge:
    """fp32's outputs on the task's shipped set; scores any scorer against them."""

    outputs: Callable[[Scorer], Any]
    agreement: Callable[[Any, Any], Any]  # (out, fp32) -> sequence_gates.RerankAgreement | LabelAgreement
    reference: Any

    def __call__(self, run: Scorer):
        return self.agreement(self.outputs(run), self.reference)


def judge(task: str, fp32: Scorer, tokenizer, max_seq: int, max_batch: int) -> Judge:
    if task == "rerank":
        outputs, agreement = rerank_outputs, sequence_gates.rerank_agreement
    else:
        outputs, agreement = classify_outputs, sequence_gates.label_agreement

    def run(scorer: Scorer):
        return outputs(scorer, tokenizer, max_seq, max_batch)

    return Judge(run, agreement, run(fp32))


@dataclass
class Int8:
    """What the int8 attempt produced: the package and its gate figures, or why there is none."""

    recipe: str | None = None
    file: Path | None = None
    module: Scorer | None = None  # the loaded package
    eager: Any = None  # the gate's figures on the chosen recipe's eager model
    figures: Any = None  # ... on the package
    refused: AccuracyGateError | None = None
    seconds: float = 0.0
    tried: list[dict[str, Any]] = field(default_factory=list)  # each recipe tried: its gate figures, eager and aoti

    def as_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            **({"file": f"1/{self.file.name}"} if self.file else {}),
            **({"eager": self.eager.as_dict()} if self.eager else {}),
            **({"aoti": self.figures.as_dict()} if self.figures else {}),
            **({"refused": str(self.refused)} if self.refused else {}),
            "tried": self.tried,
            "seconds": round(self.seconds, 1),
        }


def recipes(cfg, task: str) -> list[quantize.Recipe]:
    """The recipes to try for a sequence task on ``cfg.target``: AOTInductor packages only (what its loader runs)."""
    usable = [r for r in quantize.RECIPES if quantize.AOTI in r.paths and cfg.target in r.devices and task in r.tasks]
    if cfg.int8_recipe:
        chosen = [r for r in usable if r.name == cfg.int8_recipe]
        if not chosen:
            raise ConfigError(
                f"--int8-recipe {cfg.int8_recipe} cannot serve a sequence task on {cfg.target}; valid: "
                f"{', '.join(r.name for r in usable)}"
            )
        return chosen
    return usable


def build(
    cfg, task: str, module: torch.nn.Module, tokenizer, max_seq: int, gate: Judge, version: Path, compile_aoti, load
) -> Int8:
    """The first recipe whose eager model passes ``gate``, compiled into ``version`` and gated again as a package."""
    start = time.perf_counter()
    result = Int8()
    calib = calibration(tokenizer, max_seq, task)
    tried = recipes(cfg, task)
    failures: list[AccuracyGateError] = []
    for recipe in tried:
        quantized = recipe.apply(module, calib)
        figures = gate(quantized)
        log.info("%s int8 recipe %s (eager): %s", task, recipe.name, figures)
        attempt: dict[str, Any] = {"recipe": recipe.name, "eager": figures.as_dict()}
        result.tried.append(attempt)
        if errors := figures.failures(f"{task} int8 recipe {recipe.name} (eager)"):
            failures += errors
            continue
        file = version / INT8_FILE
        try:
            compile_aoti(quantized, cfg.target, cfg.max_batch, max_seq, file)
            package = load(file)
        except Exception as e:
            raise ArtifactError(f"{task}: building the int8 aoti artifact ({recipe.name}) failed: {e}") from e
        packaged = gate(package)
        attempt["aoti"] = packaged.as_dict()
        log.info("%s int8 recipe %s (aoti): %s", task, recipe.name, packaged)
        if errors := packaged.failures(f"{task} int8 recipe {recipe.name} aoti ({file.name})"):
            failures += errors
            file.unlink()  # a package that may not serve is not shipped
            continue
        result.recipe, result.eager, result.figures, result.file, result.module = (
            recipe.name,
            figures,
            packaged,
            file,
            package,
        )
        break
    else:
        best = max(failures, key=lambda e: e.value, default=None)
        result.refused = AccuracyGateError(
            f"{task} int8 (no recipe passed: {', '.join(r.name for r in tried) or 'none applies'}), best",
            best.metric if best else f"{task} gate",
            best.value if best else 0.0,
            best.gate if best else 1.0,
        )
    result.seconds = time.perf_counter() - start
    if result.refused:
        log.warning("%s: int8 may not serve: %s", task, result.refused)
    return result
