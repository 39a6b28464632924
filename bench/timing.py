"""Warm-up and interleaved timed rounds over every (variant, shape) cell."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.memory import MemoryProbe
from bench.stats import calls_per_round, percentile
from bench.variants import Variant
from serving.contract.manifest import read
from serving.python_backend.runtime import Runtime

log = logging.getLogger(__name__)

Shape = tuple[int, int]


@dataclass
class Cell:
    """One variant at one shape: its prepared argument, warm-up findings and timed samples."""

    variant: Variant
    shape: Shape
    arg: Any
    estimate_s: float = 0.0
    calls: int = 1
    peak_mib: float | None = None
    min_cosine: float | None = None
    samples: list[float] = field(default_factory=list)


def clock(device: str) -> Callable[[], float]:
    """A host clock that first waits for the device, so a reading covers the work launched before it."""
    if device == "cuda":

        def read() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()

        return read
    return time.perf_counter


def min_cosine(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(out.float(), ref.float(), dim=1).min())


def warm_up(
    variant: Variant,
    inputs: dict[Shape, tuple[torch.Tensor, torch.Tensor]],
    references: dict[Shape, torch.Tensor],
    warmup: int,
    probe: MemoryProbe,
    now: Callable[[], float],
) -> list[Cell]:
    """First (compiling, capturing) call per shape, accuracy and working memory from it, then uncounted calls.

    The fastest uncounted call after the first is the estimate that sizes the timed rounds (one slow call
    under another process's load must not shrink a cell to one call a round).
    """
    cells = []
    for shape, (ids, mask) in inputs.items():
        if variant.shapes is not None and shape not in variant.shapes:
            continue
        cell = Cell(variant, shape, variant.prepare(ids, mask))
        start = now()
        variant.call(cell.arg)  # compiles / captures; not counted
        first = now() - start
        probe.start_peak()
        out = variant.call(cell.arg)
        cell.peak_mib = probe.peak_mib()
        cpu_out = variant.to_cpu(out)
        if shape not in references:
            references[shape] = cpu_out  # the first variant (eager fp32) is the reference
        cell.min_cosine = min_cosine(cpu_out, references[shape])
        cell.estimate_s = first
        for i in range(warmup):
            start = now()
            variant.call(cell.arg)
            elapsed = now() - start
            cell.estimate_s = elapsed if i == 0 else min(cell.estimate_s, elapsed)
        log.info(
            "%s b%d s%d: first call %.1f ms, then %.3f ms, min cosine %.5f",
            variant.name,
            *shape,
            first * 1e3,
            cell.estimate_s * 1e3,
            cell.min_cosine,
        )
        cells.append(cell)
    return cells


def timed_rounds(
    cells: Sequence[Cell], rounds: int, budget_ms: float, max_calls: int, now: Callable[[], float]
) -> None:
    """Every round visits every shape, and at each shape every variant in turn, the order rotated per round,

    so that drift and other processes' load fall on all variants alike.
    """
    for cell in cells:
        cell.calls = calls_per_round(cell.estimate_s, budget_ms, max_calls)
    shapes = list(dict.fromkeys(c.shape for c in cells))
    by_shape = {s: [c for c in cells if c.shape == s] for s in shapes}
    for r in range(rounds):
        start = time.perf_counter()
        for shape in shapes:
            group = by_shape[shape]
            k = r % len(group)
            for cell in group[k:] + group[:k]:
                for _ in range(cell.calls):
                    t0 = now()
                    cell.variant.call(cell.arg)
                    cell.samples.append(now() - t0)
        log.info("round %d/%d: %.1f s", r + 1, rounds, time.perf_counter() - start)


def served_artifact_ms(repo: Path, tokens: tuple[int, ...], calls: int, device: str) -> dict[int, dict[str, float]]:
    """The served artifact of ``bert`` called in this process at batch 1: p50 / p99 ms per token length (on CUDA
    through the served runtime's CUDA graphs, numpy in and out)."""
    runtime = Runtime(repo / "bert", read(repo / "bert"), device)
    out = {}
    for n in tokens:
        ids = np.full((1, n), 1000, np.int64)
        mask = np.ones_like(ids)
        for _ in range(20):
            runtime(ids, mask)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            runtime(ids, mask)
            times.append((time.perf_counter() - start) * 1e3)
        out[n] = {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99)}
    return out
