"""fp8 (e4m3) for Hopper-class GPUs: every Linear of the encoder as a row-wise scaled fp8 GEMM.

- Weights: e4m3 with one scale per output channel, computed once here (static).
- Activations: e4m3 with one scale per token (row), computed in the forward from the row's absolute maximum. The
  scale, the division and the cast are pointwise or a row reduction over the tensor the previous op produced
  (LayerNorm, GELU, the attention's output), so Inductor fuses them into that producer's kernel: no standalone
  quantize kernel runs between GEMMs.
- The GEMM is ``torch._scaled_mm`` (cuBLASLt's fp8 kernels, or Inductor's Triton templates under --autotune) with
  both scales applied in its epilogue, bf16 out; the bias is added in bf16 and fuses into the consumer.
- Everything else (embeddings, LayerNorm, attention, pooling) runs in bf16: row-wise fp8 GEMMs produce bf16.

Gated like every precision: cosine and ranking against eager fp32, then the retrieval gate (export/verify.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)  # 448
MIN_CAPABILITY = (8, 9)  # fp8 tensor cores: Ada (sm_89) and Hopper (sm_90) onwards
RECIPE = "fp8-e4m3-rowwise"


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, K] as e4m3 with one float32 scale per row ([M, 1]), so that ``q * scale`` approximates ``x``."""
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


class Float8Linear(nn.Module):
    """``nn.Linear`` with e4m3 weights (a scale per output channel) and e4m3 activations (a scale per token)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        out_features, in_features = linear.weight.shape
        if in_features % 16 or out_features % 16:
            raise ValueError(f"fp8 GEMMs need both dimensions divisible by 16, got {in_features} x {out_features}")
        weight, scale = quantize_rows(linear.weight.detach())
        self.register_buffer("weight", weight)  # [N, K] row-major: its transpose is the column-major B the GEMM takes
        self.register_buffer("weight_scale", scale.t().contiguous())  # [1, N]
        bias = linear.bias.detach().to(torch.bfloat16) if linear.bias is not None else None
        self.register_buffer("bias", bias)
        self.in_features, self.out_features = in_features, out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        q, scale = quantize_rows(rows)
        out = torch._scaled_mm(q, self.weight.t(), scale_a=scale, scale_b=self.weight_scale, out_dtype=torch.bfloat16)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, e4m3 row-wise"


def ffn_only(name: str) -> bool:
    """The feed-forward block's two Linears (two thirds of a layer's GEMM work), attention's left in bf16."""
    return name.endswith(("intermediate.dense", "output.dense")) and ".attention." not in name


def quantize(encoder: nn.Module, select: Callable[[str], bool] = lambda _: True) -> nn.Module:
    """The encoder in bf16 with every Linear that ``select`` names replaced by a Float8Linear (in place)."""
    encoder.to(torch.bfloat16)
    linears = [(name, m) for name, m in encoder.named_modules() if isinstance(m, nn.Linear) and select(name)]
    for name, linear in linears:
        parent_name, _, child = name.rpartition(".")
        setattr(encoder.get_submodule(parent_name) if parent_name else encoder, child, Float8Linear(linear))
    return encoder


def unsupported(device: str) -> str | None:
    """Why fp8 cannot run on ``device``'s GPU, or None."""
    if device != "cuda":
        return "fp8 needs --target cuda"
    if not torch.cuda.is_available():
        return "fp8 needs a CUDA GPU, and none is visible"
    capability = torch.cuda.get_device_capability(0)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(0)
        return f"fp8 needs compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or later; {name} has {capability}"
    return None
