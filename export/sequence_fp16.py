"""fp16 for the sequence tasks (rerank, classify) on CUDA: the fp32 module cast to half, compiled as fp32 is, and
gated as int8 is, on what users see against fp32 on the shipped sets (export/sequence_gates.py: rerank order,
labels). A package that fails the gate is not shipped, and the serving rule (export/serving_choice.py) then picks
fp32."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from export.errors import AccuracyGateError, ArtifactError
from export.sequence_int8 import Judge, Scorer

log = logging.getLogger(__name__)

FP16_FILE = "model_fp16.pt2"


@dataclass
class Half:
    """What the fp16 attempt produced: the package and its gate figures, or why it may not serve."""

    file: Path | None = None
    module: Scorer | None = None  # the loaded package
    figures: Any = None
    refused: AccuracyGateError | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **({"file": f"1/{self.file.name}"} if self.file else {}),
            **({"aoti": self.figures.as_dict()} if self.figures else {}),
            **({"refused": str(self.refused)} if self.refused else {}),
            "seconds": round(self.seconds, 1),
        }


def build(
    task: str,
    module: torch.nn.Module,
    gate: Judge,
    version: Path,
    compile_to: Callable[[torch.nn.Module, Path], None],
    load: Callable[[Path], Scorer],
) -> Half:
    """``module`` in half precision, compiled by ``compile_to`` into ``version``, loaded back and gated."""
    start = time.perf_counter()
    result = Half()
    file = version / FP16_FILE
    try:
        compile_to(copy.deepcopy(module).half(), file)
        package = load(file)
    except Exception as e:
        raise ArtifactError(f"{task}: building the fp16 aoti artifact failed: {e}") from e
    result.figures = gate(package)
    log.info("%s fp16 (aoti): %s", task, result.figures)
    if errors := result.figures.failures(f"{task} fp16 aoti ({file.name})"):
        result.refused = errors[0]
        file.unlink()  # a package that may not serve is not shipped
        log.warning("%s: fp16 may not serve: %s", task, result.refused)
    else:
        result.file, result.module = file, package
    result.seconds = time.perf_counter() - start
    return result
