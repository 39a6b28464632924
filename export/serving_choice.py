"""Which precision ``bert`` serves: a rule a user can read, from a timing that other load does not decide.

The rule: ``bert`` serves the lowest precision that passed its accuracy gates (int8, fp8, fp16, then fp32: a lower
precision exists to be faster), unless another precision measured at least ``MARGIN`` faster at batch 1;
``export --serve PRECISION`` overrides both. A precision that failed the retrieval gate (export/verify.py) is
exported as ``bert_<precision>`` but never serves ``bert``, not even with ``--serve``. The rerank and classify models
follow the same rule, gated on rank order and labels (export/sequence_gates.py). The timing interleaves the precisions round by round and keeps, per
precision and length, the fastest round's median: load from other processes only ever adds time, so the least
disturbed round is the closest to the artifact's own cost (one median over every call served fp32 on one export
and int8 on the next on the same busy box).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from export.errors import AccuracyGateError

PREFERENCE = ("int8", "fp8", "fp16", "fp32")
MARGIN = 0.10

Runner = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def batch1_latency_ms(
    runners: dict[str, Runner], seqs: tuple[int, ...] = (16, 64), rounds: int = 7, iters: int = 5
) -> dict[str, float]:
    """Per precision: the mean over ``seqs`` of the fastest round's median batch-1 latency, in ms."""
    inputs = [(torch.randint(1000, 2000, (1, n)), torch.ones(1, n, dtype=torch.int64)) for n in seqs]
    for run in runners.values():
        for ids, mask in inputs:
            run(ids, mask)  # warm-up, uncounted
    best: dict[tuple[str, int], float] = {}
    for _ in range(rounds):
        for name, run in runners.items():
            for j, (ids, mask) in enumerate(inputs):
                times = []
                for _ in range(iters):
                    start = time.perf_counter()
                    run(ids, mask)
                    times.append(time.perf_counter() - start)
                best[name, j] = min(best.get((name, j), float("inf")), statistics.median(times))
    return {name: statistics.mean(best[name, j] for j in range(len(seqs))) * 1e3 for name in runners}


@dataclass(frozen=True)
class Choice:
    precision: str
    reason: str


def choose(
    latency_ms: dict[str, float],
    forced: str | None = None,
    refused: dict[str, AccuracyGateError] | None = None,
    gate: str = "retrieval gate",
    model: str = "bert",
) -> Choice:
    """The precision ``model`` serves, and why, in words a user reads in the manifest and the export report.

    ``refused``: the precisions that failed ``gate`` (the embedder's retrieval gate; a sequence task's gate on what
    its users see, export/sequence_gates.py), with that failure, which is raised when ``forced`` is one of them or
    no precision is left."""
    refused = refused or {}
    if forced in refused:
        raise refused[forced]
    latency_ms = {p: ms for p, ms in latency_ms.items() if p not in refused}
    if not latency_ms:
        raise next(iter(refused.values()))
    if forced is not None:
        return Choice(forced, f"export --serve {forced}")
    if not refused:
        return _by_latency(latency_ms)
    why = "; ".join(f"{p} may not serve {model}: {e}" for p, e in sorted(refused.items()))
    if len(latency_ms) == 1:
        only = next(iter(latency_ms))
        return Choice(only, f"{only} is the only precision that passed the {gate}; {why}")
    choice = _by_latency(latency_ms)
    return Choice(choice.precision, f"{choice.reason}; {why}")


def _by_latency(latency_ms: dict[str, float]) -> Choice:
    preferred = min(latency_ms, key=PREFERENCE.index)
    fastest = min(latency_ms, key=lambda p: latency_ms[p])
    if fastest != preferred and latency_ms[fastest] <= (1 - MARGIN) * latency_ms[preferred]:
        return Choice(
            fastest,
            f"{fastest} measured {latency_ms[fastest]:.2f} ms at batch 1 against {preferred}'s "
            f"{latency_ms[preferred]:.2f} ms, more than {MARGIN:.0%} faster",
        )
    if len(latency_ms) == 1:
        return Choice(preferred, f"{preferred} is the only precision exported")
    return Choice(
        preferred,
        f"{preferred} is the lowest precision that passed its gate, and no other measured {MARGIN:.0%} faster "
        f"({', '.join(f'{p} {ms:.2f} ms' for p, ms in sorted(latency_ms.items()))} at batch 1)",
    )
