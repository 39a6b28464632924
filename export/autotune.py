"""Inductor's max-autotune for the machine export runs on: the settings, and what each GEMM's tuning chose.

On x86 CPUs Inductor benchmarks its C++ GEMM templates (AVX-512, AMX where the CPU has them) against the library
kernels (oneDNN / MKL); on CUDA its Triton templates against cuBLAS. Every choice is timed at the shapes Inductor
hints for the dynamic batch and sequence dimensions, which are the traced example's (``example_shape``); the winner
is compiled into the package for every shape.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from serving.contract.hardware import cpu_flags, processor

BACKENDS = {"cpu": "CPP,ATEN", "cuda": "TRITON,ATEN"}
# The (batch, tokens) a tuned package is traced and so tuned at. The CPU serves mostly one request at a time: the
# default 2 x 16. A GPU serves batches: at 2 x 16 (M = 32 rows) Inductor's small-tile Triton templates beat cuBLAS,
# then ran 32 x 128 at 0.38x the untuned package (docs/PERFORMANCE.md); 32 x 64 is a loaded server's batch.
TUNED_AT = {"cpu": (2, 16), "cuda": (32, 64)}


def example_shape(target: str, max_batch: int, max_seq: int) -> tuple[int, int]:
    """The traced example's (batch, tokens) for a tuned package of ``target``, inside the exported ranges."""
    batch, seq = TUNED_AT[target]
    return min(batch, max_batch), max(2, min(seq, max_seq))


def tuned_by_default(target: str) -> bool:
    """Whether export tunes without being asked: on CPUs with AVX-512, where the tuned packages measured level with
    the untuned ones or better; not without it (an AVX2 EPYC: the tuned fp32 package ran at 0.78-0.87x the untuned
    one's speed at 8 rows or 128 tokens, level at 1 x 16), nor on CUDA (0.70-0.88x; docs/PERFORMANCE.md)."""
    return target == "cpu" and "avx512f" in cpu_flags()


def inductor_configs(target: str) -> dict[str, Any]:
    # No cache: every export tunes on the machine it runs on, and records what it measured.
    return {"max_autotune": True, "max_autotune_gemm_backends": BACKENDS[target], "force_disable_caches": True}


@dataclass
class Tuning:
    """What one package's tuning ran and chose, for its manifest and the compile report."""

    target: str
    shape: tuple[int, int] = (2, 16)  # the (batch, tokens) it was tuned at
    seconds: float = 0.0
    choices: list[dict[str, Any]] = field(default_factory=list)  # one per tuned GEMM

    def summary(self) -> dict[str, Any]:
        """The choices grouped by GEMM shape class (op and operand shapes, dynamic dimensions symbolic)."""
        classes: dict[str, dict[str, Any]] = {}
        for c in self.choices:
            key = f"{c['op']} {' x '.join(c['shapes'])}"
            entry = classes.setdefault(key, {"gemms": 0, "winner": c["winner"], "winner_ms": c["winner_ms"]})
            entry["gemms"] += 1
            entry.update({k: c[k] for k in ("library_ms", "candidates")})
        return {
            "ran": True,
            "tuned_for": processor(self.target),
            "backends": BACKENDS[self.target],
            "tuned_at": f"{self.shape[0]}x{self.shape[1]}",
            "seconds": round(self.seconds, 1),
            "gemm_classes": classes,
        }


def _shape(node: Any) -> str:
    return "[" + ", ".join(str(d) for d in node.get_size()) + "]"


def _is_library(choice: Any) -> bool:
    """ATen's own kernel (oneDNN, MKL, cuBLAS) rather than one of Inductor's templates."""
    return type(choice).__name__ == "ExternKernelCaller"


@contextmanager
def recording(target: str, shape: tuple[int, int] = (2, 16)) -> Iterator[Tuning]:
    """Collect Inductor's autotuning results while a package traced at ``shape`` compiles inside the block."""
    from torch._inductor import select_algorithm

    tuning = Tuning(target, shape)

    def saver(timings: dict[Any, float], name: str, input_nodes: list[Any], *_: Any) -> None:
        ranked = sorted(timings.items(), key=lambda kv: kv[1])
        if not ranked:
            return
        library = [t for c, t in ranked if _is_library(c)]
        tuning.choices.append(
            {
                "op": name,
                "shapes": [_shape(n) for n in input_nodes],
                "winner": re.sub(r"_[0-9]+$", "", ranked[0][0].name),  # templates are numbered per GEMM
                "winner_ms": round(ranked[0][1], 4),
                "library_ms": round(min(library), 4) if library else None,
                "candidates": len(ranked),
            }
        )

    select_algorithm.add_feedback_saver(saver)
    start = time.perf_counter()
    try:
        yield tuning
    finally:
        tuning.seconds = time.perf_counter() - start
        select_algorithm.clear_feedback_savers()
