"""MiniLM's fp32 AOTInductor package, autotuned as export tunes it, compiled under each of several thread counts
and each timed at each count, interleaved. ``python -m bench.compile_threads --threads 1,2``: median ms per call.

Inductor fixes a CPU package's thread count when it compiles: a team size per parallel region unless the count is
the machine's CPU count, and its GEMM templates' blocking per thread. This measures what compiling at one count and
running at another costs; export compiles at torch's count in its process, every CPU, whatever ``--threads`` says
(export/artifacts.py, ``compiled_threads``).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.forward_threads import cpu_s
from bench.inputs import load_model
from export import artifacts as art
from export import autotune

log = logging.getLogger(__name__)

SHAPES = ((1, 16), (8, 16), (1, 128), (8, 128))


def _compile(threads: int, path: Path, configs: dict) -> None:
    """Compiles in a process of its own, so that no package inherits what an earlier compile registered."""
    logging.basicConfig(level=logging.INFO)
    torch.set_num_threads(threads)
    start = time.perf_counter()
    ep = art.export_program(load_model("minilm").encoder.eval(), "cpu", 32, 128)
    configs = {**autotune.inductor_configs("cpu"), **art.fp32_configs("cpu", tuned=True), **configs}
    art.compile_aoti(ep, path, configs)
    log.info("compiled for %d thread(s) in %.0f s", threads, time.perf_counter() - start)


def compiled(threads: int, path: Path, configs: dict | None = None):
    """The package compiled under ``threads``, with more Inductor ``configs`` on top of export's, loaded."""
    child = multiprocessing.get_context("spawn").Process(target=_compile, args=(threads, path, configs or {}))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"compiling for {threads} thread(s) failed (exit {child.exitcode})")
    return torch._inductor.aoti_load_package(str(path))


def timed_calls(run, shape: tuple[int, int], budget_s: float) -> tuple[list[float], float, float]:
    """Per-call ms after one warm-up call, at least 3 and for ``budget_s``; and the wall and the process's CPU seconds
    of all the calls: CPU over wall above 1 says the forward ran on more threads than it was given."""
    ids, mask = art.example_inputs("cpu", *shape)
    run(ids, mask)
    times: list[float] = []
    cpu0, start = cpu_s(), time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < budget_s:
        t = time.perf_counter()
        run(ids, mask)
        times.append((time.perf_counter() - t) * 1e3)
    return times, time.perf_counter() - start, cpu_s() - cpu0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compile_threads", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cell-budget-s", type=float, default=0.15)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    counts = [int(t) for t in args.threads.split(",")]
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        runs = {c: compiled(c, Path(tmp) / f"t{c}.pt2") for c in counts}
        lines = ["| run at | shape | " + " | ".join(f"compiled for {c}" for c in counts) + " |"]
        lines.append("|---|---|" + "---:|" * len(counts))
        for threads in counts:
            torch.set_num_threads(threads)
            times: dict[tuple[int, tuple[int, int]], list[float]] = {(c, s): [] for c in counts for s in SHAPES}
            for r in range(args.rounds):
                order = counts if r % 2 == 0 else counts[::-1]
                for shape in SHAPES:
                    for c in order:
                        times[c, shape] += timed_calls(runs[c], shape, args.cell_budget_s)[0]
            for shape in SHAPES:
                cells = [f"{statistics.median(times[c, shape]):.2f}" for c in counts]
                lines.append(f"| {threads} | {shape[0]} x {shape[1]} | " + " | ".join(cells) + " |")
    sys.stdout.write(f"{torch.__version__}; median ms per call\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
