"""GEMM epilogues handed to cuBLASLt on CUDA: the FFN's GELU runs inside its up-projection GEMM.

Inductor keeps cuBLAS for the fp16 GEMMs (its Triton templates were slower at BERT's shapes under
max-autotune) and fuses the bias into them, but GELU stays a kernel of its own: at batch 32 x 128 on an
H200 ``triton_poi_fused_gelu`` was 0.27 ms of the 1.82 ms model, reading and writing the 4096 x 3072
intermediate once more (``python -m bench.quant_probe``). ``torch._addmm_activation(bias, x, W.T,
use_gelu=True)`` is cuBLASLt's GELU_BIAS epilogue; Inductor and AOTInductor call it as an extern kernel
(``aoti_torch_cuda__addmm_activation``). Its GELU is the tanh approximation, BERT's the erf one: the export
gate measures the difference like any other (MiniLM's real weights, fp32: min cosine 0.999997 over the
gate's sentences). ONNX export traces the plain Linear + GELU.
"""

from __future__ import annotations

import torch
from torch import nn

from export.quantize import replace_submodule


class GeluLinear(nn.Module):
    """``gelu(linear(x))`` as one cuBLASLt GEMM with a GELU_BIAS epilogue; a plain Linear + GELU elsewhere."""

    def __init__(self, dense: nn.Linear, act: nn.Module) -> None:
        super().__init__()
        self.dense = dense
        self.act = act

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not hidden_states.is_cuda or torch.onnx.is_in_onnx_export():
            return self.act(self.dense(hidden_states))
        rows = hidden_states.reshape(-1, hidden_states.shape[-1])
        out = torch._addmm_activation(self.dense.bias, rows, self.dense.weight.t(), use_gelu=True)
        return out.view(*hidden_states.shape[:-1], out.shape[-1])


def fuse_gelu_epilogues(module: nn.Module) -> int:
    """Replace, in place, every Hugging Face ``BertIntermediate`` (dense with a bias + GELU) by a ``GeluLinear``.

    Returns how many were replaced. Exact GELUs become the epilogue's tanh form; tanh GELUs stay what they were.
    """
    targets = [
        (name, child)
        for name, child in module.named_modules()
        if type(child).__name__ == "BertIntermediate"
        and isinstance(getattr(child, "dense", None), nn.Linear)
        and child.dense.bias is not None
        and _is_gelu(getattr(child, "intermediate_act_fn", None))
    ]
    for name, child in targets:
        replace_submodule(module, name, GeluLinear(child.dense, child.intermediate_act_fn))
    return len(targets)


# transformers' tanh-approximation GELUs (ACT2FN "gelu_pytorch_tanh", "gelu_new", "gelu_fast"): the epilogue's own.
_TANH_GELUS = frozenset({"GELUTanh", "PytorchGELUTanh", "NewGELUActivation", "FastGELUActivation"})


def _is_gelu(act: object) -> bool:
    if isinstance(act, nn.GELU) or type(act).__name__ in _TANH_GELUS:
        return True
    # ACT2FN["gelu"]: GELUActivation around the exact nn.functional.gelu (not its Python twin, "gelu_python")
    return type(act).__name__ == "GELUActivation" and getattr(act, "act", None) is nn.functional.gelu
