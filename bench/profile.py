"""Where an exported model spends its time, kernel by kernel: its served artifact in-process under torch.profiler.

    python -m bench.profile --repository model_repository --batch 1 --tokens 16

On CUDA the profiler sees every kernel (CUPTI), so the served AOTInductor package itself is profiled. On the CPU
the package's generated C++ kernels are invisible to it: the repository's ExportedProgram is compiled again with
Inductor's kernel profiling on (``cpp.enable_kernel_profile``, the export's other settings unchanged, tuned again
where export tuned) and that copy is profiled, with the served package timed beside it so the instrumentation's
cost shows.

Prints the top kernels by self time with their share of the profiled forward, the time no recorded kernel
accounts for (library calls the profiler does not see: a package's ``aoti_torch_cpu_addmm_out`` records its bias
copy but not its GEMM; on CUDA, gaps between kernels), and the kernel count per forward; writes
reports/profile-<model>-<device>-<B>x<S>.{md,trace.json} (the Chrome trace opens in https://ui.perfetto.dev) and,
in reports/profile-<model>-<device>-source/, the code Inductor generated for the served package (the wrapper and
kernel C++, Triton kernels on CUDA), to read what was fused.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile

from bench.report import machine
from bench.timing import clock
from export import artifacts as art
from export import autotune
from serving.contract.artifacts import AOTI, EXPORTED_PROGRAM, load_module
from serving.contract.manifest import read, verify

log = logging.getLogger("bench.profile")
# What a reader opens in the package: generated code and its metadata, not the compiled objects or weights.
SOURCE_SUFFIXES = (".cpp", ".h", ".py", ".json")


@dataclass(frozen=True)
class Kernel:
    name: str
    calls_per_forward: float
    self_ms_per_forward: float
    share: float  # of the profiled forward's wall time


def artifact(model_dir: Path, kind: str) -> Path:
    """The verified file of one of the model's artifact paths."""
    manifest = read(model_dir)
    if kind not in manifest["artifacts"]:
        raise SystemExit(f"{model_dir.name} has no {kind} artifact (it has {', '.join(manifest['artifacts'])})")
    rel = manifest["artifacts"][kind]["file"]
    verify(model_dir, manifest, only=[rel])
    return model_dir / rel


def instrumented_copy(model_dir: Path, work: Path) -> tuple[Callable[..., torch.Tensor], float]:
    """The model's ExportedProgram compiled again with a profiler record around every generated C++ kernel (and
    tuned again, where export tuned the served package; an fp32 one's GEMMs as export compiled them)."""
    ep = torch.export.load(str(artifact(model_dir, EXPORTED_PROGRAM)))
    manifest = read(model_dir)
    configs: dict[str, Any] = {"cpp.enable_kernel_profile": True}
    tuned = bool(manifest.get("autotune", {}).get("ran"))
    if tuned:
        configs.update(autotune.inductor_configs("cpu"))
    if manifest.get("precision") == "fp32":  # its GEMMs as export compiled them
        configs.update(art.fp32_configs("cpu", tuned))
    start = time.perf_counter()
    package = work / "instrumented.pt2"
    art.compile_aoti(ep, package, configs)
    return load_module(AOTI, package, "cpu"), time.perf_counter() - start


def medians_ms(
    modules: dict[str, Callable[..., torch.Tensor]], inputs: tuple[torch.Tensor, ...], calls: int, device: str
) -> dict[str, float]:
    """Median ms per forward of each module, their calls interleaved so that load on the machine hits all alike."""
    now = clock(device)
    times: dict[str, list[float]] = {name: [] for name in modules}
    for _ in range(calls):
        for name, module in modules.items():
            start = now()
            module(*inputs)
            times[name].append((now() - start) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def is_kernel(event: FunctionEvent, device: str) -> bool:
    """A kernel: on CUDA a device-side event; on the CPU an event with no CPU children (a generated C++ kernel or
    a library call such as a oneDNN GEMM), the wrapper's bookkeeping included."""
    if device == "cuda":
        return event.device_type == torch.autograd.DeviceType.CUDA
    return event.device_type == torch.autograd.DeviceType.CPU and not event.cpu_children


def kernels(events: list[FunctionEvent], device: str, forwards: int, forward_ms: float) -> tuple[list[Kernel], float]:
    """Kernels grouped by name, largest self time first, each with its share of ``forward_ms`` (the profiled
    forward's wall time), and the kernel count per forward."""
    calls: dict[str, int] = {}
    self_us: dict[str, float] = {}
    for e in events:
        if not is_kernel(e, device):
            continue
        us = e.self_device_time_total if device == "cuda" else e.self_cpu_time_total
        calls[e.name] = calls.get(e.name, 0) + 1
        self_us[e.name] = self_us.get(e.name, 0.0) + us
    rows = []
    for name, us in self_us.items():
        ms = us / forwards / 1e3
        rows.append(Kernel(name, calls[name] / forwards, ms, ms / forward_ms))
    return sorted(rows, key=lambda k: -k.self_ms_per_forward), sum(calls.values()) / forwards


def save_source(package: Path, dest: Path) -> list[str]:
    """The generated code inside an AOTInductor package (a zip), flattened into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    names = []
    with zipfile.ZipFile(package) as z:
        for info in z.infolist():
            name = Path(info.filename).name
            if name.endswith(SOURCE_SUFFIXES):
                (dest / name).write_bytes(z.read(info))
                names.append(name)
    return sorted(names)


def markdown(result: dict[str, Any], top: int) -> str:
    r = result
    lines = [
        f"# Profile: {r['model']} ({r['precision']}) on {r['where']}, batch {r['batch']} x {r['tokens']} tokens",
        "",
        f"Command: `{r['command']}`",
        "",
        f"Served package: {r['served_ms']:.3f} ms per forward (median of {r['calls']}).",
    ]
    if r.get("instrumented_ms") is not None:
        lines.append(
            f"Profiled: the instrumented copy (compiled in {r['compile_s']:.0f} s), {r['instrumented_ms']:.3f} ms per "
            "forward unprofiled."
        )
    lines += [
        f"Kernels per forward: {r['kernels_per_forward']:.0f}. Trace: `{r['trace']}`. Generated source: "
        f"`{r['source_dir']}` ({len(r['source_files'])} files).",
        "",
        "| kernel | calls / forward | self ms / forward | share |",
        "| --- | ---: | ---: | ---: |",
    ]
    for k in r["kernels"][:top]:
        name = k["name"] if len(k["name"]) <= 100 else k["name"][:97] + "..."
        lines.append(f"| `{name}` | {k['calls_per_forward']:.0f} | {k['self_ms_per_forward']:.3f} | {k['share']:.1%} |")
    unrecorded = r["unrecorded_ms"]
    lines.append(f"| no recorded kernel | | {unrecorded:.3f} | {unrecorded / r['profiled_ms']:.1%} |")
    lines += [
        "",
        f"Profiled forward: {r['profiled_ms']:.3f} ms (wall, profiler on). The last row is the time no recorded "
        "kernel accounts for: library calls the profiler does not see (a package's `aoti_torch_cpu_addmm_out` "
        "records its bias copy, not its GEMM), and on CUDA the gaps between kernels.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--model", default="bert", help="an encoder model of the repository")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--calls", type=int, default=20, help="forwards profiled (and timed for the served package)")
    p.add_argument("--top", type=int, default=10, help="kernels in the table")
    p.add_argument("--output-dir", type=Path, default=Path("reports"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)

    model_dir = args.repository / args.model
    manifest = read(model_dir)
    device = "cuda" if manifest["target"] == "cuda" else "cpu"
    package = artifact(model_dir, AOTI)
    served = load_module(AOTI, package, device)
    ids = torch.randint(1000, 2000, (args.batch, args.tokens), dtype=torch.int64, device=device)
    inputs = (ids, torch.ones_like(ids))
    stem = f"profile-{args.model}-{device}-{args.batch}x{args.tokens}"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "model": args.model,
        "precision": manifest["precision"],
        "batch": args.batch,
        "tokens": args.tokens,
        "calls": args.calls,
        "machine": machine(device),
        "command": "python -m bench.profile " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    result["where"] = result["machine"].get("gpu") or result["machine"]["cpu"]
    with torch.inference_mode(), tempfile.TemporaryDirectory(prefix="bench-profile-") as work:
        modules = {"served": served}
        if device == "cpu":
            modules["instrumented"], result["compile_s"] = instrumented_copy(model_dir, Path(work))
        for module in modules.values():
            for _ in range(5):
                module(*inputs)
        for name, ms in medians_ms(modules, inputs, args.calls, device).items():
            result[f"{name}_ms"] = ms
        profiled = modules.get("instrumented", served)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(args.calls):
                profiled(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            result["profiled_ms"] = (time.perf_counter() - start) * 1e3 / args.calls
    trace = args.output_dir / f"{stem}.trace.json"
    prof.export_chrome_trace(str(trace))
    rows, per_forward = kernels(list(prof.events()), device, args.calls, result["profiled_ms"])
    result["kernels"] = [k.__dict__ for k in rows]
    result["unrecorded_ms"] = max(0.0, result["profiled_ms"] - sum(k.self_ms_per_forward for k in rows))
    result["kernels_per_forward"] = per_forward
    result["trace"] = str(trace)
    source = args.output_dir / f"profile-{args.model}-{device}-source"
    result["source_dir"] = str(source)
    result["source_files"] = save_source(package, source)
    (args.output_dir / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result, args.top)
    (args.output_dir / f"{stem}.md").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
