"""int8 recipes for the BERT encoder, tried by export in order and gated on cosine vs fp32.

MiniLM's residual stream carries a few massive activations (hidden channels 99, 63, 223, almost only on the
[CLS] token) that set the range of every dynamic activation quantization and crush everything else: plain
per-channel ``quantize_dynamic`` reaches 0.916 minimum cosine, torchao per-token 0.968, onnxruntime's own
per-channel dynamic int8 0.951. Two remedies:

- fp32 outlier split: keep the 8 largest input channels of each Linear (found on the calibration batches)
  in fp32 and quantize the rest (index_fill + int8 GEMM + small fp32 GEMM + add per Linear): 0.996.
- SmoothQuant (``torchao_int8_smoothquant``): divide each input channel by ``s_j = max|x_j|^a /
  max|W[:, j]|^(1-a)`` and multiply the weight column by it. Alone it does not pass (alpha 0.5 / 0.65 / 0.8:
  0.985 / 0.981 / 0.953); one-Linear-at-a-time sensitivity puts the FFN outputs (layers 0-3, input = the
  GELU of the intermediate) far ahead of the rest (0.9934 alone for layer 3), and smoothing them makes them
  worse. Smoothing every other Linear, leaving the FFN outputs unsmoothed, reaches 0.992 (alpha 0.3-0.65);
  giving the six FFN outputs the fp32 outlier split instead reaches 0.995 with 6 split Linears instead of 36.

MiniLM-L6, 2 threads, median ms (p99), min cosine over the 31 gate sentences (10 languages, 3-256 tokens,
AOTInductor artifact), variants interleaved in one process: ``python -m bench --threads 2 --families
aoti,int8,onnx --batches 1,8,32 --seqs 16,128 --rounds 9`` on the 2-core AMD EPYC (AVX-512 VNNI), AOTInductor
packages frozen (grad mode off, see ``artifacts.compile_aoti``).

====================================== =========== =========== ========== ========== ==========
served as                              b1 s16      b1 s128     b8 s128    b32 s128   min cosine
====================================== =========== =========== ========== ========== ==========
fp32 AOTI                              2.01 (4.2)  9.0 (11.5)  63.9 (70)  273 (303)  1.0
torchao_int8_smoothquant (AOTI)        1.02 (2.5)  5.35 (9.3)  39.0 (45)  199 (222)  .995
torchao_int8_dynamic_fp32_outliers     1.60 (3.6)  6.22 (9.3)  42.8 (55)  278 (317)  .996
dynamic_perchannel_fp32_outliers (TS)  1.26 (3.6)  6.37 (17.8) 43.5 (53)  311 (370)  .946
onnxruntime int8 per-channel, 2 thr.   1.28 (2.6)  6.70 (9.4)  41.4 (53)  186 (211)  .951
onnxruntime int8 per-channel, 1 thr.   1.01 (2.0)  8.29 (9.2)  65.6 (70)  301 (324)  .951
====================================== =========== =========== ========== ========== ==========

A later run on the same box (``--families aoti,int8 --int8-recipes torchao_int8_smoothquant,
pt2e_x86_int8_smoothquant --batches 1,8,32 --seqs 16,128 --rounds 7``): fp32 AOTI 2.10 / 9.44 / 68.1 / 275 ms,
smoothquant 1.09 / 5.55 / 41.0 / 209, ``pt2e_x86_int8_smoothquant`` 1.46 / 5.83 / 39.0 / 179 (p99 2.2 / 9.3 /
47 / 187; 1.54x fp32 at 32 x 128, where smoothquant is 1.31x), gate min cosine .990 (AOTI .99041). It is
last in the order: slower at batch 1, and its margin over the gate is small; ``export --int8-recipe
pt2e_x86_int8_smoothquant`` ships it where batches of 32 long texts are the load.

The fbgemm TorchScript recipe scored 0.994 on an earlier torch/torchao; here it fails the gate (0.946), so
export falls through to the next recipe. The same run at batch 1 with ``ONEDNN_MAX_CPU_ISA
FBGEMM_ENABLE_INSTRUCTIONS MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2`` (torch kernels only;
onnxruntime ignores them): smoothquant 1.53 / 10.2 ms at 16 / 128 tokens, TorchScript fbgemm 1.65 / 10.0,
torchao outliers 2.04 / 10.9; smoothquant's cosine on the benchmark texts drops there (0.9965 / 0.9930 vs
0.9995 / 0.9989 with AVX-512), so AVX2 keeps fbgemm first where it passes.
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

# Calibration batches: each the model's positional inputs, (input_ids, attention_mask[, token_type_ids]).
Calibration = list[tuple[torch.Tensor, ...]]

# Input channels per Linear kept in fp32: 2 already lifts MiniLM above the gate, 8 leaves margin.
OUTLIER_CHANNELS = 8
# SmoothQuant migration strength: 0.4-0.65 score alike on MiniLM (0.9949-0.9957 min cosine), 0.8 loses.
SMOOTHQUANT_ALPHA = 0.5


@dataclass(frozen=True)
class Recipe:
    name: str
    paths: frozenset[str]
    description: str
    build: Callable[[nn.Module, Calibration], nn.Module] = field(repr=False, compare=False)
    devices: frozenset[str] = frozenset({"cpu", "cuda"})  # where its quantized kernels run
    # The tasks whose model it can rewrite: a recipe that captures the embedder's graph itself (ids and mask in)
    # cannot take a sequence classifier's three inputs.
    tasks: frozenset[str] = frozenset({"embed", "rerank", "classify"})

    def apply(self, encoder: nn.Module, calibration: Calibration) -> nn.Module:
        """Return a quantized deep copy of ``encoder``; ``encoder`` itself is left untouched."""
        model = copy.deepcopy(encoder).eval()
        with torch.no_grad():
            model = self.build(model, calibration)
        log.info("int8 recipe %s applied (%s)", self.name, ", ".join(sorted(self.paths)))
        return model.eval()


def _with_weight(linear: nn.Linear, weight: torch.Tensor) -> nn.Linear:
    """A new Linear of ``linear``'s shape, device and dtype, with ``weight`` and a copy of its bias."""
    new = nn.Linear(
        linear.in_features, linear.out_features, bias=linear.bias is not None, device=weight.device, dtype=weight.dtype
    )
    new.weight.data.copy_(weight)
    if linear.bias is not None:
        new.bias.data.copy_(linear.bias.detach())
    return new


class OutlierSplitLinear(nn.Module):
    """``linear(x)`` as an int8-able Linear over all but ``idx`` input channels plus fp32 over ``idx``."""

    def __init__(self, linear: nn.Linear, idx: torch.Tensor) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.register_buffer("idx", idx)
        self.register_buffer("outlier_weight", weight[:, idx].contiguous())
        self.main = _with_weight(linear, weight.index_fill(1, idx, 0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inliers = x.index_fill(-1, self.idx, 0.0)
        return self.main(inliers) + F.linear(x.index_select(-1, self.idx), self.outlier_weight)


def _quantizable_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every Linear of the encoder layers. The BERT pooler does not reach the sentence embedding; in a sequence
    classifier the pooler and the head run once per sequence (little work) and their output is the score itself,
    so they stay fp32."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and ".encoder." in f".{n}."}


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
        for inputs in calibration:
            mask[:] = [inputs[1]]  # the attention mask
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return stats


def _outlier_split(name: str, linear: nn.Linear, absmax: torch.Tensor, k: int = OUTLIER_CHANNELS) -> OutlierSplitLinear:
    """``linear`` split over its k input channels of largest calibration |x|."""
    idx = absmax.topk(min(k, linear.in_features)).indices.sort().values
    log.debug("%s: fp32 input channels %s", name, idx.tolist())
    return OutlierSplitLinear(linear, idx)


def replace_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    """Put ``module`` where ``model``'s submodule ``name`` (a dotted path) was."""
    parent, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent), attr, module)


def split_outliers(model: nn.Module, calibration: Calibration, k: int = OUTLIER_CHANNELS) -> nn.Module:
    """Replace each quantizable Linear by an :class:`OutlierSplitLinear` over its k largest input channels."""
    linears = _quantizable_linears(model)
    stats = input_absmax(model, list(linears), calibration)
    for name, linear in linears.items():
        replace_submodule(model, name, _outlier_split(name, linear, stats[name], k))
    return model


class SmoothedLinear(nn.Module):
    """``linear(x)`` as ``(x / s) @ (W * s)^T + b``: the same function, with a flatter activation to quantize.

    SmoothQuant's per-input-channel scale moves the range of channels that carry massive activations into
    the weight. BERT is post-LayerNorm (the LayerNorm output is also the residual stream), so ``1 / s``
    cannot be folded into the LayerNorm; it stays an explicit multiply, which Inductor fuses into the
    dynamic-quantization kernel of the int8 GEMM.
    """

    def __init__(self, linear: nn.Linear, scale: torch.Tensor) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.register_buffer("inv_scale", (1.0 / scale).to(weight.dtype))
        self.linear = _with_weight(linear, weight * scale.to(weight.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.inv_scale)


def smoothing_scale(x_absmax: torch.Tensor, weight: torch.Tensor, alpha: float = SMOOTHQUANT_ALPHA) -> torch.Tensor:
    """SmoothQuant's ``s_j = max|x_j|^alpha / max|W[:, j]|^(1 - alpha)`` per input channel j."""
    w_absmax = weight.detach().abs().amax(0).clamp(min=1e-5)
    return (x_absmax.clamp(min=1e-5).pow(alpha) / w_absmax.pow(1 - alpha)).clamp(min=1e-5)


def _is_ffn_output(name: str) -> bool:
    """BERT's FFN output dense (``layer.N.output.dense``), whose input is the GELU of the intermediate."""
    return name.endswith(".output.dense") and not name.endswith(".attention.output.dense")


def smooth_and_split(
    model: nn.Module,
    calibration: Calibration,
    alpha: float = SMOOTHQUANT_ALPHA,
    outlier_channels: int = OUTLIER_CHANNELS,
) -> nn.Module:
    """fp32 rewrite before int8: every Linear smoothed, except the FFN outputs, which split their outliers.

    Smoothing the FFN output's input (a few huge GELU channels on [CLS]) moves the range into weight
    columns that then dominate every row's int8 scale; there the fp32 outlier split is what works.
    """
    linears = _quantizable_linears(model)
    stats = input_absmax(model, list(linears), calibration)
    for name, linear in linears.items():
        if _is_ffn_output(name):
            replace_submodule(model, name, _outlier_split(name, linear, stats[name], outlier_channels))
        else:
            replace_submodule(model, name, SmoothedLinear(linear, smoothing_scale(stats[name], linear.weight, alpha)))
    return model


def base_name(name: str) -> str:
    """The original Linear's name under a rewrite's wrapper (``.linear`` of a smoothed, ``.main`` of a split)."""
    return name.removesuffix(".linear").removesuffix(".main")


class Bf16Linear(nn.Module):
    """``linear(x)`` with bf16 operands and fp32 accumulation (oneDNN's AMX / AVX-512 BF16 GEMM on the CPU); the
    result comes back as fp32 and the bias is added in fp32."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().float(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x.to(torch.bfloat16), self.weight).to(x.dtype)
        return out if self.bias is None else out + self.bias


def _register_prepack_shape() -> None:
    """The shape of oneDNN's packed int8 weight (``onednn.qlinear_prepack``: [N, K] in, [K, N] out), which torch
    does not declare: export traces the call with fake tensors, and Inductor's freezing then folds it into a
    constant, packed once at load like the weights of its own int8 patterns."""
    try:
        torch.library.register_fake("onednn::qlinear_prepack")(
            lambda weight, x_shape: weight.new_empty(weight.shape[::-1])
        )
    except RuntimeError:  # torch declares it
        pass


_register_prepack_shape()


class Int8Linear(nn.Module):
    """``linear(x)`` as oneDNN's int8 Linear (``onednn.qlinear_pointwise``): per-channel symmetric int8 weights
    (7-bit where the CPU lacks VNNI: :func:`reduce_range`), per-token asymmetric activations (a zero point per
    token, corrected with the weight's row sums), the same quantization as torchao's asymmetric recipe.

    The activations are u8, the operand of x86's int8 multiplies (``vpmaddubsw``, VNNI's ``vpdpbusd``). Given s8
    ones, oneDNN's AVX2 GEMM adds 128 to them and sums every weight column again on each call to correct for it:
    1.29 ms against 0.32 ms for 16 tokens through a 384 x 1536 Linear (AVX2 EPYC, 1 thread), and MiniLM's int8
    package ran slower than fp32 at 1 x 16.
    Compiled (freezing), the weight is packed once at load; the per-token scale, the zero-point correction and the
    bias fuse into one elementwise kernel after the GEMM. The weight must be a Parameter (a frozen constant).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        w_max = int8_weight_max(weight.device)
        w_scale = (weight.abs().amax(1) / w_max).clamp(min=torch.finfo(torch.float32).eps)
        qweight = (weight / w_scale[:, None]).round().clamp(-w_max, w_max)
        self.qweight = nn.Parameter(qweight.to(torch.int8), requires_grad=False)  # [out, in]
        self.w_scale = nn.Parameter(w_scale, requires_grad=False)
        self.w_rowsum = nn.Parameter(qweight.sum(1) * w_scale, requires_grad=False)  # for the activation zero point
        bias = torch.zeros(linear.out_features) if linear.bias is None else linear.bias.detach().float()
        self.bias = nn.Parameter(bias.clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).float()
        lo = rows.amin(-1, keepdim=True).clamp(max=0)
        hi = rows.amax(-1, keepdim=True).clamp(min=0)
        scale = ((hi - lo) / 255).clamp(min=torch.finfo(torch.float32).eps)
        zero = -torch.round(lo / scale)
        q = (torch.round(rows / scale) + zero).clamp(0, 255).to(torch.uint8)
        packed = torch.ops.onednn.qlinear_prepack(self.qweight, None)
        acc = torch.ops.onednn.qlinear_pointwise(
            q, 1.0, 0, packed, self.w_scale, None, None, 1.0, 0, torch.float32, "none", [None], ""
        )  # the integer product times w_scale
        out = acc * scale - (scale * zero) * self.w_rowsum + self.bias
        return out.reshape(*x.shape[:-1], -1).to(x.dtype)


def reduce_range(device: torch.device) -> bool:
    """Whether int8 GEMMs on ``device`` need 7-bit operands. Without VNNI (AVX2, AVX-512 without VNNI) oneDNN
    multiplies u8 activations (s8 ones shifted by 128) by s8 weights with ``vpmaddubsw``, which adds each pair of
    products in int16 and saturates past 32,767: two products of 255 x 127 reach 64,770, and the compiled model
    silently computes another function than its eager graph (torchao's ``_int_mm`` is exact there). 7-bit weights,
    or 7-bit activations, keep every pair in range."""
    from torchao.utils import should_reduce_range

    return should_reduce_range(device)


def int8_weight_max(device: torch.device) -> int:
    """The largest int8 weight magnitude whose products cannot saturate ``device``'s int8 GEMM."""
    return 63 if reduce_range(device) else 127


def bf16_supported() -> bool:
    """Whether this CPU multiplies bf16 natively (AMX or AVX-512 BF16); elsewhere oneDNN emulates it, slower than fp32."""
    return torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()


# The Linears the mixed recipe keeps int8: the attention's query and key projections, the only projection classes
# whose int8 error the retrieval set absorbs with every other Linear in bf16 (docs/INT8.md).
INT8_ATTENTION = (".attention.self.query", ".attention.self.key")


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


def _torchao_int8(model: nn.Module, targets: set[str], asymmetric: frozenset[str] = frozenset()) -> nn.Module:
    """torchao int8 GEMMs: per-token dynamic activations (symmetric, or asymmetric for the ``asymmetric`` ones: a
    zero point per token, corrected by the weight's row sums), per-channel symmetric weights."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, MappingType, quantize_

    for mapping, names in (
        (MappingType.SYMMETRIC, targets - asymmetric),
        (MappingType.ASYMMETRIC, targets & asymmetric),
    ):
        if names:
            config = Int8DynamicActivationInt8WeightConfig(act_mapping_type=mapping)
            quantize_(model, config, filter_fn=lambda _, fqn, names=names: fqn in names)
    return model


def _torchao_int8_dynamic_fp32_outliers(model: nn.Module, calibration: Calibration) -> nn.Module:
    model = split_outliers(model, calibration)
    return _torchao_int8(model, {n for n in _quantizable_linears(model) if n.endswith(".main")})


def _torchao_int8_smoothquant(model: nn.Module, calibration: Calibration) -> nn.Module:
    model = smooth_and_split(model, calibration)
    linears = set(_quantizable_linears(model))
    return _torchao_int8(model, linears, asymmetric=frozenset(linears))


def _int8_qk_bf16(model: nn.Module, calibration: Calibration) -> nn.Module:
    """The smoothquant rewrite; query and key projections int8 (:class:`Int8Linear`: oneDNN's int8 Linear once
    compiled), every other Linear bf16 (a split FFN output's outlier channels stay fp32)."""
    model = smooth_and_split(model, calibration)
    for name, linear in _quantizable_linears(model).items():
        int8 = base_name(name).endswith(INT8_ATTENTION)
        replace_submodule(model, name, Int8Linear(linear) if int8 else Bf16Linear(linear))
    return model


def _int8_onednn_smoothquant(model: nn.Module, calibration: Calibration) -> nn.Module:
    """The smoothquant rewrite with every Linear an :class:`Int8Linear` (oneDNN's packed int8 Linear once
    compiled). Without VNNI, ATen's ``_int_mm`` (torchao's recipes) has no fast CPU kernel: 12-22x slower than
    fp32 on AVX2 (docs/INT8.md), where oneDNN's u8s8 kernels run."""
    model = smooth_and_split(model, calibration)
    for name, linear in _quantizable_linears(model).items():
        replace_submodule(model, name, Int8Linear(linear))
    return model


def _pt2e_x86_smoothquant(model: nn.Module, calibration: Calibration) -> nn.Module:
    """The smoothquant rewrite, then PT2E's x86 Inductor quantizer: dynamic per-tensor int8 activations,
    per-channel weights, which Inductor lowers (with freezing) to oneDNN int8 Linears (``qlinear_pointwise``)
    with their epilogues fused; torchao's ``_int_mm`` path leaves dequantize / GELU / requantize as separate
    passes over memory. Per-tensor activations are coarser than torchao's per-token ones: with every Linear int8
    the gate set's min cosine is 0.985; leaving one group fp32 at a time, the value projections are the cheapest
    group that lifts it past 0.99 (0.991; the six intermediates, 4x their work, 0.993), so they stay fp32."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    from export.artifacts import export_program

    model = smooth_and_split(model, calibration)
    seq_limit = model.bert.config.max_position_embeddings
    graph = export_program(model, calibration[0][0].device.type, PT2E_BATCH_LIMIT, seq_limit).module()
    graph.graph.eliminate_dead_code()  # e.g. a BERT pooler the embedding does not use: the quantizer trips on it
    graph.recompile()
    quantizer = x86.X86InductorQuantizer()
    reduce = reduce_range(calibration[0][0].device)
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config(is_dynamic=True, reduce_range=reduce))
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and ".value." in f"{name}.":
            quantizer.set_module_name_qconfig(name, None)
    graph = prepare_pt2e(graph, quantizer)
    for input_ids, attention_mask in calibration[:2]:  # the weight observers see the weights once
        graph(input_ids, attention_mask)
    graph = convert_pt2e(graph)
    _allow_eval(graph)
    return graph


def _allow_eval(graph: nn.Module) -> None:
    """A captured graph's ``.eval()`` raises (torchao's replacement returns None): make it return the graph,
    as callers of every recipe expect. (Wrapping the graph in a module instead breaks its re-export.)"""
    from torchao.quantization.pt2e import allow_exported_model_train_eval

    allow_exported_model_train_eval(graph)
    switch = graph.train

    def train(mode: bool = True) -> nn.Module:
        switch(mode)
        return graph

    graph.train = train
    graph.eval = lambda: train(False)


# The batch bound of the graph the PT2E recipe captures (export re-exports it with the served bounds).
PT2E_BATCH_LIMIT = 1024

_PT2E_X86 = Recipe(
    name="pt2e_x86_int8_smoothquant",
    paths=frozenset({AOTI}),
    description=(
        "PT2E x86 Inductor quantizer (oneDNN int8 Linears, fused epilogues): dynamic per-tensor activations, "
        f"per-channel weights, after the smoothquant rewrite (alpha {SMOOTHQUANT_ALPHA}); value projections fp32"
    ),
    build=_pt2e_x86_smoothquant,
    devices=frozenset({"cpu"}),
    tasks=frozenset({"embed"}),
)

_INT8_QK_BF16 = Recipe(
    name="int8_qk_bf16",
    paths=frozenset({EXPORTED_PROGRAM, AOTI}),
    description=(
        "int8 per-token asymmetric activations, per-channel weights (oneDNN int8 Linear, packed weights) for the "
        f"attention query and key projections (SmoothQuant alpha {SMOOTHQUANT_ALPHA}); every other Linear bf16 (AMX / AVX-512 BF16), the FFN "
        f"outputs' {OUTLIER_CHANNELS} largest input channels fp32"
    ),
    build=_int8_qk_bf16,
    devices=frozenset({"cpu"}),
)

_INT8_ONEDNN = Recipe(
    name="int8_onednn_smoothquant",
    paths=frozenset({EXPORTED_PROGRAM, AOTI}),
    description=(
        "int8 per-token asymmetric activations, per-channel weights (7-bit without VNNI) in oneDNN's packed int8 "
        f"Linear for every Linear; SmoothQuant (alpha {SMOOTHQUANT_ALPHA}) on every Linear but the FFN outputs, "
        f"which keep their {OUTLIER_CHANNELS} largest input channels fp32"
    ),
    build=_int8_onednn_smoothquant,
    devices=frozenset({"cpu"}),
)

_SMOOTHQUANT, _TORCHAO_OUTLIERS, _DYNAMIC_OUTLIERS = (
    Recipe(
        name="torchao_int8_smoothquant",
        paths=frozenset({EXPORTED_PROGRAM, AOTI}),
        description=(
            f"torchao int8 per-token asymmetric activations, per-channel weights; SmoothQuant (alpha {SMOOTHQUANT_ALPHA}) "
            f"on every Linear but the FFN outputs, which keep their {OUTLIER_CHANNELS} largest input channels fp32"
        ),
        build=_torchao_int8_smoothquant,
    ),
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
        devices=frozenset({"cpu"}),  # the qengine's int8 kernels are CPU-only
    ),
)

# With VNNI (AVX-512 VNNI, AMX) torchao's int8 GEMMs under AOTInductor win at every length, smoothing ahead of
# the all-Linear outlier split. Without VNNI (AVX2) their `_int_mm` has no fast kernel, and oneDNN's packed int8
# Linear (7-bit weights there) comes first.
# The PT2E recipe comes after those: it is the fastest at batch 32 x 128 but slower at batch 1 x 16 and only just
# above the gate (see the module docstring), so export ships it only where the others fail. With VNNI the
# all-oneDNN recipe is last: it was not measured as a whole model there.
# Where the CPU multiplies bf16 natively, the mixed int8 / bf16 recipe comes first: it is the one that passes the
# retrieval gate (docs/INT8.md); the all-int8 recipes follow for --int8-recipe and the bench.
RECIPES: tuple[Recipe, ...] = (
    (_SMOOTHQUANT, _TORCHAO_OUTLIERS, _DYNAMIC_OUTLIERS, _PT2E_X86, _INT8_ONEDNN)
    if not reduce_range(torch.device("cpu"))
    else (_INT8_ONEDNN, _DYNAMIC_OUTLIERS, _SMOOTHQUANT, _TORCHAO_OUTLIERS, _PT2E_X86)
)
if bf16_supported():
    RECIPES = (_INT8_QK_BF16, *RECIPES)


def get_recipe(name: str) -> Recipe:
    for recipe in RECIPES:
        if recipe.name == name:
            return recipe
    raise ValueError(f"unknown int8 recipe {name!r}; valid: {', '.join(r.name for r in RECIPES)}")
