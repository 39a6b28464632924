"""Build each artifact path from an encoder and load it back for verification and serving."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch import nn
from torch.export import Dim, ExportedProgram

from export.errors import ArtifactError
from serving.contract.artifacts import ONNX, LoadError, load_module
from serving.contract.hardware import cpu_flags

log = logging.getLogger(__name__)

Runner = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def example_inputs(device: str, batch: int = 2, seq: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1000, 2000, (batch, seq), dtype=torch.int64, device=device)
    return ids, torch.ones_like(ids)


def export_program(
    encoder: nn.Module, device: str, max_batch: int, max_seq: int, example: tuple[int, int] = (2, 16)
) -> ExportedProgram:
    """torch.export with a dynamic batch and sequence dimension, traced at ``example`` (batch, tokens): the sizes
    Inductor hints, and so tunes at, for the dynamic dimensions."""
    batch = Dim("batch", min=1, max=max_batch)
    seq = Dim("seq", min=2, max=max_seq)
    dims = {0: batch, 1: seq}
    with torch.no_grad():
        return torch.export.export(
            encoder,
            example_inputs(device, *example),
            dynamic_shapes={"input_ids": dims, "attention_mask": dims},
        )


def save_exported_program(ep: ExportedProgram, path: Path) -> None:
    torch.export.save(ep, str(path))


def fp32_configs(target: str, tuned: bool = False) -> dict[str, Any]:
    """Inductor settings for an fp32 package. On a CPU without AVX-512 its Linears stay ATen's ``mm`` rather than
    oneDNN over weights packed at load: on an AVX2 EPYC (1 thread) the packed package ran 1.0x the unpacked one's
    speed at 1 x 16 and 0.66-0.88x at 8 rows or 128 tokens (docs/PERFORMANCE.md). A package with int8 GEMMs
    keeps the packing (Inductor finds oneDNN's int8 Linear in the same pass), and so does an autotuned one (tuning
    times Inductor's C++ GEMM templates against oneDNN's packed Linear; it finds nothing to tune in ATen's)."""
    unpacked = target == "cpu" and not tuned and "avx512f" not in cpu_flags()
    return {"cpp.weight_prepack": False} if unpacked else {}


def compile_aoti(ep: ExportedProgram, path: Path, configs: dict[str, Any] | None = None) -> None:
    """AOTInductor package; freezing folds the weights into the compiled graph (packed GEMMs on CPU).

    Inductor freezes only with grad mode off: with it on, ``freezing`` is silently ignored and every Linear
    stays an unpacked ``mm`` (MiniLM fp32, batch 1, 16 tokens, 2 threads: 5.6 ms instead of 2.4 ms).
    ``configs``: more Inductor settings on top (kernel profiling, autotuning, :func:`fp32_configs`).

    Every OpenMP region of a CPU package takes the calling thread's team (:func:`callers_teams`).
    """
    configs = {"freezing": True, **callers_teams(), **(configs or {})}
    unpacked = configs.pop("cpp.weight_prepack", True) is False
    with torch.no_grad(), _fp32_linears_unpacked(unpacked):
        torch._inductor.aoti_compile_and_package(ep, package_path=str(path), inductor_configs=configs)


def callers_teams() -> dict[str, bool]:
    """Inductor fixes each OpenMP region's team at the compiling process's thread count (``num_threads(N)``: N
    threads whatever the serving instance's ``--threads`` says) unless that count is the machine's CPU count. torch
    counts physical cores, so on a host with SMT, or in a container whose CPU set is smaller than the host, export
    asks for ``cpp.dynamic_threads``: the caller's team in every region, its work split at run time. Elsewhere the
    regions already take the caller's team, and the package stays as Inductor writes it. Run at 1 thread with the
    process on one CPU, MiniLM's package with teams fixed at 2 ran 9-48x slower (docs/PERFORMANCE.md)."""
    return {"cpp.dynamic_threads": True} if torch.get_num_threads() != os.cpu_count() else {}


def _fp32_linears_unpacked(on: bool) -> contextlib.AbstractContextManager:
    """Inductor's ``cpp.weight_prepack`` cannot be set per package: Inductor registers its weight-packing patterns
    once per process, at the first freezing compile, and only if that compile packs. After an unpacked fp32 package,
    MiniLM's int8 package (its ``_int_mm`` then rewritten by one of them into oneDNN's int8 Linear) compiled to
    ATen's ``_int_mm`` and ran 16x slower than fp32 (AVX2 EPYC, 1 x 16 tokens); the bf16 Linears of the mixed
    recipe and the PT2E recipe's int8 ones still rely on them. So every compile keeps the setting on, and an
    unpacked fp32 package hides MKL from the one check that packs fp32 Linears (``_is_packable_linear``), as a
    torch built without MKL would: they stay ATen's ``addmm``, which calls MKL at run time all the same."""
    return mock.patch.object(torch._C, "has_mkl", False) if on else contextlib.nullcontext()


def compiled_threads(target: str) -> dict[str, int]:
    """The manifest's record of the intra-op thread count a CPU package was compiled under (torch's, in the
    exporting process). Inductor fixes the GEMM templates' blocking per thread at it; the regions' teams are the
    caller's (:func:`callers_teams`). Export leaves it at torch's default whatever ``--threads`` says: compiled for
    1 thread, MiniLM's autotuned fp32 package ran 1.8-2.4x slower even at 1 thread on a 16-core Xeon, and 1.2-1.3x
    slower at 2 threads on a 2-core EPYC (``python -m bench.compile_threads``, docs/PERFORMANCE.md)."""
    return {"compiled_threads": torch.get_num_threads()} if target == "cpu" else {}


def omp_teams(package: Path) -> Counter[str]:
    """The OpenMP parallel regions of a CPU package's generated C++: how many fix their team (``num_threads(N)``, N
    threads whatever the caller set) and how many take the caller's thread count."""
    teams: Counter[str] = Counter()
    with zipfile.ZipFile(package) as z:
        for name in (n for n in z.namelist() if n.endswith(".cpp")):
            for fixed in re.findall(r"#pragma omp parallel(?: for)?(?: num_threads\((\d+)\))?", z.read(name).decode()):
                teams[f"num_threads({fixed})" if fixed else "the caller's"] += 1
    return teams


def trace_torchscript(encoder: nn.Module, device: str, path: Path) -> None:
    with torch.no_grad():
        traced = torch.jit.trace(encoder, example_inputs(device), check_trace=False, strict=False)
    traced = torch.jit.freeze(traced.eval())
    traced.save(str(path))


def export_onnx(encoder: nn.Module, device: str, path: Path, max_batch: int, max_seq: int) -> None:
    """ONNX with dynamic batch and sequence axes (the TorchScript-based exporter: quick and stable)."""
    with torch.no_grad():
        torch.onnx.export(
            encoder,
            example_inputs(device),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "seq"},
                "attention_mask": {0: "batch", 1: "seq"},
                "embedding": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )


def load_runner(kind: str, path: Path, device: str) -> Runner:
    """Load an artifact back as a callable (input_ids, attention_mask) -> embedding (CPU float32 out).

    On CUDA it is loaded as the server runs it (single-threaded AOTInductor container, see ``load_module``), so the
    accuracy gate checks the artifact the way it will be served.
    """
    if kind == ONNX:
        return _onnx_runner(path)
    try:
        model = load_module(kind, path, device, cuda_graphs=device.startswith("cuda"))
    except LoadError as e:
        raise ArtifactError(str(e)) from e

    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return model(input_ids.to(device), attention_mask.to(device)).float().cpu()

    return run


def _onnx_runner(path: Path) -> Runner:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        feeds = {"input_ids": input_ids.cpu().numpy(), "attention_mask": attention_mask.cpu().numpy()}
        return torch.from_numpy(session.run(["embedding"], feeds)[0])

    return run


def aoti_kernel_report(path: Path) -> dict[str, object]:
    """What AOTInductor generated: fused kernels it wrote and library (extern) kernels it calls."""
    generated: set[str] = set()
    extern: set[str] = set()
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not name.endswith(".cpp"):
                continue
            src = z.read(name).decode(errors="replace")
            generated |= set(re.findall(r'extern "C"\s+void\s+(cpp_fused_\w+)\(', src))
            generated |= set(re.findall(r"\b(triton_(?:poi|per|red|tem|mm|bmm)_\w+)", src))
            extern |= set(re.findall(r"\baoti_torch_(?:cpu|cuda)_(\w+)\(", src))
    return {"generated_kernels": len(generated), "extern_kernels": sorted(extern)}


def graph_breaks(encoder: nn.Module, device: str) -> dict[str, int]:
    """Graphs and graph breaks as TorchDynamo sees the eager model (torch.export cannot report breaks)."""
    explanation = torch._dynamo.explain(encoder)(*example_inputs(device))
    torch._dynamo.reset()
    return {"graphs": int(explanation.graph_count), "graph_breaks": int(explanation.graph_break_count)}
