"""One benchmark run: load the model, build each variant in turn, warm up, time interleaved rounds, report."""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench import report as rep
from bench.config import BenchConfig
from bench.inputs import load_model, make_inputs, token_stream, vocab_size
from bench.memory import MIB, MemoryProbe
from bench.timing import Cell, Shape, clock, timed_rounds, warm_up
from bench.variants import EAGER_FP32, Builder, Variant

log = logging.getLogger(__name__)


class RetrievalScorer:
    """Each variant's search of export's retrieval set against the first variant scored (eager fp32, built first):
    the figures export's gate reads (export/verify.py), beside the variant's timings."""

    def __init__(self, cfg: BenchConfig, tokenizer: Any) -> None:
        self.cfg, self.tokenizer = cfg, tokenizer
        self.verifier: Any = None

    def score(self, variant: Variant) -> dict[str, float] | None:
        if variant.shapes is not None:  # built for some shapes only: it cannot take the set's batches
            return None

        def run(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return variant.to_cpu(variant.call(variant.prepare(ids, mask)))

        if self.verifier is None:
            from export.verify import Verifier

            started = time.perf_counter()
            self.verifier = Verifier(run, self.tokenizer, self.cfg.max_seq, max_batch=self.cfg.max_batch)
            log.info("retrieval reference: %s in %.1f s", variant.name, time.perf_counter() - started)
        r = self.verifier.retrieval(run)
        log.info("%s: retrieval %s", variant.name, r)
        return {"nn_agreement": r.nn_agreement, "recall_at_10": r.recall_at_10, "min_cosine": r.min_cosine}


def run(cfg: BenchConfig) -> dict[str, Any]:
    log.info("bench config: %s", cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    info = rep.machine(cfg.device)
    log.info("machine: %s", info)
    model = load_model(cfg.model)
    stream = token_stream(model.tokenizer) if model.tokenizer is not None else None
    vocab = vocab_size(model.encoder)
    inputs = {(b, s): make_inputs(b, s, cfg.seed, stream, vocab) for b, s in cfg.shapes}
    probe, now = MemoryProbe(cfg.device), clock(cfg.device)
    references: dict[Shape, torch.Tensor] = {}
    cells: list[Cell] = []
    variants: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        builder = Builder(cfg, model, Path(tmp))
        scorer = RetrievalScorer(cfg, model.tokenizer) if cfg.retrieval and model.tokenizer is not None else None
        for plan in builder.plans():
            spent = time.perf_counter() - started
            if cfg.build_budget_s and spent > cfg.build_budget_s and plan.name != EAGER_FP32:
                log.warning("%s: not built, the build budget of %.0f s is spent", plan.name, cfg.build_budget_s)
                skipped.append({"name": plan.name, "reason": f"build budget of {cfg.build_budget_s:.0f} s spent"})
                continue
            before = probe.resident()
            try:
                variant = plan.build()
                cells += warm_up(variant, inputs, references, cfg.warmup, probe, now)
            except Exception as e:  # one failing path must not cost the others' figures
                log.exception("%s: not timed", plan.name)
                skipped.append({"name": plan.name, "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
                if plan.name == EAGER_FP32:
                    raise
                continue
            resident = (probe.resident() - before) / MIB
            variants.append(
                {
                    "name": variant.name,
                    "precision": variant.precision,
                    "build_s": round(variant.build_s, 2),
                    "resident_mib": round(resident, 1),
                    "note": variant.note,
                    "retrieval": scorer.score(variant) if scorer else None,
                }
            )
            log.info("%s: built in %.1f s, holds %.0f MiB", variant.name, variant.build_s, resident)
        prepared = time.perf_counter()
        timed_rounds(cells, cfg.rounds, cfg.cell_budget_ms, cfg.max_calls, now)
    finished = time.perf_counter()
    info["loadavg_end"] = list(os.getloadavg())
    return {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()},
        "model": model.source,
        "inputs": "text from the shipped sentences" if stream else "seeded random token ids",
        "machine": info,
        "seconds": {"build_and_warmup": round(prepared - started, 1), "timed": round(finished - prepared, 1)},
        "variants": variants,
        "skipped": skipped,
        "cells": rep.cell_rows(cells),
    }
