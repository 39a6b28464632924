"""What a 1-thread CPU forward costs under three conditions, interleaved in one process: free to run on any CPU,
pinned to one CPU, and pinned with a neighbour (a process multiplying matrices on two other CPUs, or on the one other
where there are two). The forwards: eager fp32, onnxruntime fp32, with ``--repository`` an exported repository's fp32
and int8 AOTInductor packages, and with ``--compile`` packages this tool compiles as ``bench.compile_threads`` does
(at torch's thread count with the caller's OpenMP teams, as export compiles, and with teams fixed at that count; at
every CPU too where that is another count).

    python -m bench.pinning [--repository build/repository] [--compile]

``python -m bench`` pins each thread count's run to cores of its own (bench/cpu_host_int8.sh); this says what the
pinning and the run beside it change. Median ms per call.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bench.compile_threads import compiled, timed_calls
from bench.inputs import load_model
from export import artifacts as art
from serving.contract import manifest as mf
from serving.contract.artifacts import AOTI, ONNX, load_module

log = logging.getLogger(__name__)

SHAPES = ((1, 16), (8, 16), (1, 128))
CONDITIONS = ("any CPU", "pinned", "pinned, neighbour busy")


def _neighbour(cpus: set[int], busy, stop) -> None:
    """Multiplies 512 x 512 matrices on a thread per CPU of ``cpus`` while ``busy`` is set, until ``stop`` is."""
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(len(cpus))
    a = torch.randn(512, 512)
    while not stop.is_set():
        if busy.wait(0.05):
            a = torch.tanh(a @ a)


def _pin(cpus: set[int]) -> None:
    """Every thread of this process onto ``cpus``: ``sched_setaffinity(0)`` moves only the calling thread, and an
    OpenMP team started earlier would keep running where it was."""
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), cpus)


def _bert_models(repository: Path) -> list[tuple[str, dict]]:
    """The repository's bert models (the served one and the other precision), with their manifests."""
    found = []
    for model_dir in sorted(repository.glob("bert*")):
        if (model_dir / mf.MANIFEST).is_file() and (manifest := mf.read(model_dir)).get("runtime") == AOTI:
            found.append((model_dir.name, manifest))
    return found


def _forwards(
    repository: Path | None, work: Path, compile_package: bool, packages: dict[str, Path]
) -> dict[str, Callable[..., object]]:
    runs: dict[str, Callable[..., object]] = {}
    onnx = None
    for name, manifest in _bert_models(repository) if repository else []:
        files = manifest["artifacts"]
        label = f"repo {name} {manifest['precision']}"
        packages[label] = repository / name / files[AOTI]["file"]
        runs[label] = load_module(AOTI, packages[label], "cpu")
        if ONNX in files and manifest["precision"] == "fp32":
            onnx = repository / name / files[ONNX]["file"]
    if compile_package:
        for label, threads, configs in _compiles():
            packages[label] = work / f"{len(packages)}.pt2"
            runs[label] = compiled(threads, packages[label], configs)
    runs["eager fp32"] = encoder = load_model("minilm").encoder.eval()
    if onnx is None:
        onnx = work / "fp32.onnx"
        art.export_onnx(encoder, "cpu", onnx, 32, 128)
    runs["onnxruntime fp32"] = _onnx(onnx)
    return runs


def _compiles() -> list[tuple[str, int, dict]]:
    """What ``--compile`` compiles: at torch's own count, as export compiles (every region takes the caller's team)
    and with each region's team fixed at that count (Inductor's default where the count is not the machine's CPU
    count, as one per physical core on a host with SMT); and at every CPU where that is another count."""
    every, own = os.cpu_count() or 1, torch.get_num_threads()
    compiles = [
        (f"own compile fp32 at {own}", own, {}),
        (f"own compile fp32 at {own}, fixed teams", own, {"cpp.threads": own, "cpp.dynamic_threads": False}),
    ]
    if own != every:
        compiles.append((f"own compile fp32 at {every}", every, {}))
    return compiles


def _onnx(path: Path) -> Callable[..., object]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda ids, mask: session.run(None, dict(zip(names, (ids.numpy(), mask.numpy()), strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pinning", description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, help="an exported repository: time its bert packages too")
    parser.add_argument("--compile", action="store_true", help="also time packages compiled here (_compiles)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cell-budget-s", type=float, default=0.3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        parser.error("needs 2 CPUs at least: one to pin to, one for the neighbour")
    everywhere, one, others = set(cpus), {cpus[1]}, set((cpus[:1] + cpus[2:])[:2])
    ctx = multiprocessing.get_context("spawn")
    busy, stop = ctx.Event(), ctx.Event()
    neighbour = ctx.Process(target=_neighbour, args=(others, busy, stop), daemon=True)
    neighbour.start()
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        packages: dict[str, Path] = {}
        runs = _forwards(args.repository, Path(tmp), args.compile, packages)
        teams = {name: art.omp_teams(path) for name, path in packages.items()}
        torch.set_num_threads(1)
        times: dict[tuple[str, str, tuple[int, int]], list[float]] = {}
        wall: dict[tuple[str, str, tuple[int, int]], float] = {}
        cpu: dict[tuple[str, str, tuple[int, int]], float] = {}
        for r in range(args.rounds):
            order = CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]
            for condition in order:
                _pin(everywhere if condition == "any CPU" else one)
                busy.set() if "neighbour" in condition else busy.clear()
                time.sleep(0.2)
                for shape in SHAPES:
                    for name, run in runs.items():
                        cell = (name, condition, shape)
                        samples, wall_s, cpu_used = timed_calls(run, shape, args.cell_budget_s)
                        times.setdefault(cell, []).extend(samples)
                        wall[cell] = wall.get(cell, 0.0) + wall_s
                        cpu[cell] = cpu.get(cell, 0.0) + cpu_used
            log.info("round %d/%d done", r + 1, args.rounds)
        stop.set()
        busy.clear()
    neighbour.join(5)
    header = "| forward | shape | " + " | ".join(CONDITIONS) + " |"
    lines = [header, "|---|---|" + "---:|" * len(CONDITIONS)]
    for name in runs:
        for shape in SHAPES:
            keys = [(name, c, shape) for c in CONDITIONS]
            cells = [f"{statistics.median(times[k]):.2f} ({cpu[k] / wall[k]:.1f})" for k in keys]
            lines.append(f"| {name} | {shape[0]} x {shape[1]} | " + " | ".join(cells) + " |")
    sys.stdout.write(
        f"torch {torch.__version__}, 1 thread; pinned to CPU {cpus[1]}, neighbour on CPUs {sorted(others)}; "
        "median ms per call (CPU seconds per wall second)\n" + "\n".join(lines) + "\n"
    )
    for name, counted in teams.items():
        regions = ", ".join(f"{n} {team}" for team, n in sorted(counted.items()))
        sys.stdout.write(f"{name}: OpenMP parallel regions: {regions} (this machine has {os.cpu_count()} CPUs)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
