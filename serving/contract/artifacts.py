"""The artifact files a model version holds, and how a torch artifact is loaded back (never compiled)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

EXPORTED_PROGRAM, AOTI, TORCHSCRIPT, ONNX = "exported_program", "aoti", "torchscript", "onnx"
PATHS = (EXPORTED_PROGRAM, AOTI, TORCHSCRIPT, ONNX)
FILENAMES = {
    EXPORTED_PROGRAM: "model.ep.pt2",
    AOTI: "model.aoti.pt2",
    TORCHSCRIPT: "model.ts",
    ONNX: "model.onnx",
}
# The order a runner prefers when several paths exist: compiled first.
RUNTIME_PREFERENCE = (AOTI, TORCHSCRIPT, EXPORTED_PROGRAM)


class LoadError(RuntimeError):
    """A torch artifact that cannot be loaded; the message names the file."""


def load_module(kind: str, path: Path, device: str, cuda_graphs: bool = False) -> Callable[..., torch.Tensor]:
    """Load a torch artifact (AOTInductor package, TorchScript, ExportedProgram); never compiles.

    ``cuda_graphs``: the caller captures the module's calls in CUDA graphs. The AOTInductor container then
    runs single-threaded: its multi-threaded mode polls CUDA events between runs, which a capture forbids
    ("operation not permitted when stream is capturing"). One caller thread per loaded module, then.
    """
    try:
        if kind == AOTI:
            return torch._inductor.aoti_load_package(str(path), run_single_threaded=cuda_graphs)
        if kind == TORCHSCRIPT:
            return torch.jit.load(str(path), map_location=device)
        if kind == EXPORTED_PROGRAM:
            return torch.export.load(str(path)).module()
    except Exception as e:  # any loader failure names the file
        raise LoadError(f"cannot load {kind} artifact {path}: {e}") from e
    raise LoadError(f"unknown torch artifact kind {kind!r}")
