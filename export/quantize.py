"""int8 recipes for the BERT encoder, tried by export in order and gated on cosine vs fp32.

MiniLM's residual stream carries a few massive activations (hidden channels 99, 63, 223, almost only on the
[CLS] token) that set the range of every dynamic activation quantization and crush everything else: plain
per-channel ``quantize_dynamic`` reaches 0.916 minimum cosine, torchao per-token 0.981. Keeping the 8 largest
input channels of each Linear (found on the calibration batches) in fp32 and quantizing the rest restores
0.994 and 0.998. One-layer-at-a-time sensitivity ranks FFN output (layers 0-2) and FFN input (3-4) worst,
but the drops add up over all layers, so keeping whole layers in fp32 cannot reach the gate cheaply.

MiniLM-L6, batch 1, 2 threads, median ms, variants interleaved in one process (``python bench.py``: build
each recipe, TorchScript-trace / AOTInductor-compile with freezing, time 9 rounds x 20 calls at 16 and 128
tokens); min cosine over 31 sentences in 10 languages, 3-256 tokens. "AVX2" = the same run with
``ONEDNN_MAX_CPU_ISA FBGEMM_ENABLE_INSTRUCTIONS MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2``.

===================================== ========== ========== ===========
served as                             AVX-512    AVX2       min cosine
                                      16 / 128   16 / 128   (AVX-512/2)
===================================== ========== ========== ===========
fp32 eager                            12.0/14.3  6.5/21.4   1.0
fp32 AOTI                             3.7/12.3   3.9/19.0   1.0
torchao_int8_dynamic_fp32_outliers    1.8/7.2    3.0/16.1   .998/.997
dynamic_perchannel_fp32_outliers (TS) 2.3/9.6    2.7/16.6   .994/.994
torchao int8 dynamic, no split (AOTI) 1.3/5.7    2.6/14.3   .981/.975
===================================== ========== ========== ===========

fp32 eager swung 5.5-12 ms at 16 tokens between runs (shared machine); the int8 rows kept their order.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

# Artifact paths an exported precision may take:
EXPORTED_PROGRAM, AOTI, TORCHSCRIPT, ONNX = "exported_program", "aoti", "torchscript", "onnx"

Calibration = list[tuple[torch.Tensor, torch.Tensor]]

# Input channels per Linear kept in fp32: 2 already lifts MiniLM above the gate, 8 leaves margin.
OUTLIER_CHANNELS = 8


@dataclass(frozen=True)
class Recipe:
    name: str
    paths: frozenset[str]
    description: str
    build: Callable[[nn.Module, Calibration], nn.Module] = field(repr=False, compare=False)

    def apply(self, encoder: nn.Module, calibration: Calibration) -> nn.Module:
        """Return a quantized deep copy of ``encoder``; ``encoder`` itself is left untouched."""
        model = copy.deepcopy(encoder).eval()
        with torch.no_grad():
            model = self.build(model, calibration)
        log.info("int8 recipe %s applied (%s)", self.name, ", ".join(sorted(self.paths)))
        return model.eval()


class OutlierSplitLinear(nn.Module):
    """``linear(x)`` as an int8-able Linear over all but ``idx`` input channels plus fp32 over ``idx``."""

    def __init__(self, linear: nn.Linear, idx: torch.Tensor) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.register_buffer("idx", idx)
        self.register_buffer("outlier_weight", weight[:, idx].contiguous())
        self.main = nn.Linear(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            device=weight.device,
            dtype=weight.dtype,
        )
        self.main.weight.data.copy_(weight.index_fill(1, idx, 0.0))
        if linear.bias is not None:
            self.main.bias.data.copy_(linear.bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inliers = x.index_fill(-1, self.idx, 0.0)
        return self.main(inliers) + F.linear(x.index_select(-1, self.idx), self.outlier_weight)


def _quantizable_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every Linear on the embedding path; the BERT pooler does not reach the sentence embedding."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and ".pooler." not in f".{n}."}


def input_absmax(model: nn.Module, names: list[str], calibration: Calibration) -> dict[str, torch.Tensor]:
    """Per-input-channel max |x| seen by each named Linear over the real tokens of the calibration batches."""
    if not calibration:
        raise ValueError("this recipe needs calibration batches")
    stats: dict[str, torch.Tensor] = {}
    mask: list[torch.Tensor] = []

    def hook(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        def record(_: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].detach().abs() * mask[0].unsqueeze(-1).to(args[0].dtype)
            amax = x.flatten(0, -2).amax(0)
            stats[name] = torch.maximum(stats[name], amax) if name in stats else amax

        return record

    handles = [model.get_submodule(n).register_forward_pre_hook(hook(n)) for n in names]
    try:
        for input_ids, attention_mask in calibration:
            mask[:] = [attention_mask]
            model(input_ids, attention_mask)
    finally:
        for handle in handles:
            handle.remove()
    return stats


def split_outliers(model: nn.Module, calibration: Calibration, k: int = OUTLIER_CHANNELS) -> nn.Module:
    """Replace each quantizable Linear by an :class:`OutlierSplitLinear` over its k largest input channels."""
    linears = _quantizable_linears(model)
    stats = input_absmax(model, list(linears), calibration)
    for name, linear in linears.items():
        idx = stats[name].topk(min(k, linear.in_features)).indices.sort().values
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent), attr, OutlierSplitLinear(linear, idx))
        log.debug("%s: fp32 input channels %s", name, idx.tolist())
    return model


def _quantize_dynamic(model: nn.Module, targets: set[str]) -> nn.Module:
    """fbgemm/x86 dynamic int8: per-channel weights, per-tensor activations (7-bit, safe for AVX2 kernels)."""
    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
        return torch.ao.quantization.quantize_dynamic(model, dict.fromkeys(targets, qconfig), dtype=torch.qint8)


def _dynamic_perchannel_fp32_outliers(model: nn.Module, calibration: Calibration) -> nn.Module:
    model = split_outliers(model, calibration)
    mains = {n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.endswith(".main")}
    return _quantize_dynamic(model, mains)


def _torchao_int8(model: nn.Module, targets: set[str]) -> nn.Module:
    """torchao int8 GEMMs: per-token symmetric dynamic activations, per-channel weights."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    quantize_(model, Int8DynamicActivationInt8WeightConfig(), filter_fn=lambda _, fqn: fqn in targets)
    return model


def _torchao_int8_dynamic_fp32_outliers(model: nn.Module, calibration: Calibration) -> nn.Module:
    model = split_outliers(model, calibration)
    return _torchao_int8(model, {n for n in _quantizable_linears(model) if n.endswith(".main")})


_TORCHAO_OUTLIERS, _DYNAMIC_OUTLIERS = (
    Recipe(
        name="torchao_int8_dynamic_fp32_outliers",
        paths=frozenset({EXPORTED_PROGRAM, AOTI}),
        description=(
            f"torchao int8 per-token activations, per-channel weights; the {OUTLIER_CHANNELS} largest input "
            "channels of each Linear (from calibration) stay fp32"
        ),
        build=_torchao_int8_dynamic_fp32_outliers,
    ),
    Recipe(
        name="dynamic_perchannel_fp32_outliers",
        paths=frozenset({TORCHSCRIPT}),
        description=(
            f"torch.ao quantize_dynamic (qengine kernels), per-channel int8 weights; the {OUTLIER_CHANNELS} "
            "largest input channels of each Linear (from calibration) stay fp32"
        ),
        build=_dynamic_perchannel_fp32_outliers,
    ),
)

# With AVX-512 (VNNI/AMX) oneDNN's int8 GEMMs under AOTInductor win at every length; on AVX2 the fbgemm
# TorchScript module is faster at short texts and level at 128 tokens.
RECIPES: tuple[Recipe, ...] = (
    (_TORCHAO_OUTLIERS, _DYNAMIC_OUTLIERS)
    if torch.backends.cpu.get_cpu_capability().startswith("AVX512")
    else (_DYNAMIC_OUTLIERS, _TORCHAO_OUTLIERS)
)


def get_recipe(name: str) -> Recipe:
    for recipe in RECIPES:
        if recipe.name == name:
            return recipe
    raise ValueError(f"unknown int8 recipe {name!r}; valid: {', '.join(r.name for r in RECIPES)}")
