"""How much can 8-bit GEMMs gain BERT-base at batch 32 x 128 on a CUDA GPU? (``python -m bench.quant_probe``)

Three measurements, one process, seeded weights and inputs:

1. The GEMMs of one layer at M = batch x length tokens, each precision alone: fp16 (cuBLAS), int8
   ``torch._int_mm`` (cuBLAS), int8 and fp16 under Inductor ``max-autotune`` (its Triton templates beside
   cuBLAS), fp8 e4m3 ``torch._scaled_mm`` with row-wise scales; then each as a whole dynamic linear (quantize
   the activation, GEMM, rescale to fp16), compiled, as a quantized model would run it.
2. Where the fp16 model's time goes: Inductor-compiled (frozen, as export's AOTInductor package), timed as one
   CUDA graph, its kernels summed by class (GEMM, attention, the rest) from the profiler over plain calls.
3. The whole model with torchao's int8 and fp8 dynamic recipes, compiled the same way, against fp16.

From 1 and 2 it prints the bound an 8-bit model can reach: the non-GEMM time stays, the GEMM time shrinks by
the measured whole-linear speed-up (Amdahl). Every time is the median of CUDA-graph replays (``--reps`` calls
a replay, timed with events). Writes ``quant-probe.json`` under ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bench.timing import min_cosine

log = logging.getLogger(__name__)

HIDDEN, FFN = 768, 3072
# (name, K, N, count per layer): query, key, value and attention output are four 768 x 768 Linears.
LINEARS = [("768x768 (q, k, v, out)", HIDDEN, HIDDEN, 4), ("ffn in", HIDDEN, FFN, 1), ("ffn out", FFN, HIDDEN, 1)]
MODELS = ("fp16", "fp16 GELU epilogue", "int8 torchao dynamic", "bf16", "fp8 torchao dynamic rowwise")
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max


def graph_ms(fn: Callable[[], Any], reps: int = 20, replays: int = 30) -> float:
    """Median ms of one ``fn()`` call: ``reps`` calls captured in one CUDA graph, replayed ``replays`` times."""
    fn()  # compiles, outside any capture
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def quantize_int8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-5) / 127
    return (x.float() / scale).round().clamp(-127, 127).to(torch.int8), scale


def quantize_fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def int8_linear(x: torch.Tensor, w_t: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    xq, x_scale = quantize_int8_rows(x)
    return (torch._int_mm(xq, w_t).float() * x_scale * w_scale).half()


def fp8_linear(x: torch.Tensor, w_t: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    xq, x_scale = quantize_fp8_rows(x)
    return torch._scaled_mm(xq, w_t, scale_a=x_scale, scale_b=w_scale, out_dtype=torch.half, use_fast_accum=True)


def gemm_variants(x: torch.Tensor, w: torch.Tensor) -> dict[str, tuple[Callable[[], torch.Tensor], bool]]:
    """name -> (call, whether its output is comparable with x @ w.T); int8 GEMMs alone return raw int32."""
    autotune: dict[str, Any] = {"mode": "max-autotune-no-cudagraphs", "dynamic": False}
    wq, w_scale8 = quantize_int8_rows(w)
    wf, w_scalef = quantize_fp8_rows(w)
    xq, _ = quantize_int8_rows(x)
    xf, x_scalef = quantize_fp8_rows(x)
    w_scale8, w_scalef = w_scale8.t().contiguous(), w_scalef.t().contiguous()
    linear16, int_mm = torch.compile(F.linear, **autotune), torch.compile(torch._int_mm, **autotune)
    linear8, linearf8 = torch.compile(int8_linear, **autotune), torch.compile(fp8_linear, **autotune)
    return {
        "fp16 cuBLAS": (lambda: F.linear(x, w), True),
        "fp16 max-autotune": (lambda: linear16(x, w), True),
        "int8 GEMM cuBLAS": (lambda: torch._int_mm(xq, wq.t()), False),
        "int8 GEMM max-autotune": (lambda: int_mm(xq, wq.t()), False),
        "fp8 GEMM rowwise": (
            lambda: torch._scaled_mm(
                xf, wf.t(), scale_a=x_scalef, scale_b=w_scalef, out_dtype=torch.half, use_fast_accum=True
            ),
            True,
        ),
        "int8 linear max-autotune": (lambda: linear8(x, wq.t(), w_scale8), True),
        "fp8 linear max-autotune": (lambda: linearf8(x, wf.t(), w_scalef), True),
    }


def probe_gemms(tokens: int, reps: int) -> list[dict[str, Any]]:
    """Per Linear shape: ms of each variant alone and its relative error against the fp32 product."""
    rows = []
    for name, k, n, count in LINEARS:
        g = torch.Generator(device="cuda").manual_seed(k * n)
        x = torch.randn(tokens, k, device="cuda", generator=g, dtype=torch.half)
        w = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).half()
        ref = x.float() @ w.float().t()
        for variant, (fn, comparable) in gemm_variants(x, w).items():
            try:
                ms = graph_ms(fn, reps)
                error = ((fn().float() - ref).norm() / ref.norm()).item() if comparable else None
            except Exception as e:  # one variant's failure (no kernel for this chip) must not end the probe
                log.warning("%s %s failed: %s", name, variant, e)
                rows.append({"linear": name, "variant": variant, "error": str(e)[:500]})
                continue
            tflops = 2 * tokens * k * n / ms / 1e9
            rows.append(
                {"linear": name, "k": k, "n": n, "per_layer": count, "variant": variant, "ms": ms,
                 "tflops": tflops, "rel_error": error}
            )  # fmt: skip
            log.info("%-24s %-26s %.4f ms  %6.0f TFLOP/s  err %s", name, variant, ms, tflops, error)
    return rows


def bert_base() -> nn.Module:
    from transformers import BertConfig, BertModel

    from export.checkpoint import BERT_BASE_SEED
    from export.encoder import Encoder

    torch.manual_seed(BERT_BASE_SEED)  # the weights export's "bert-base" has
    return Encoder(BertModel(BertConfig(), add_pooling_layer=False)).eval()


def kernel_class(name: str) -> str:
    """GEMM (cuBLAS, CUTLASS, Inductor's Triton GEMM templates), attention, or the rest (Inductor's fused
    pointwise and reduction kernels: layer norms, GELU, residuals, (de)quantization, copies)."""
    lowered = name.lower()
    if any(tag in lowered for tag in ("flash", "fmha", "attention", "efficient", "sdpa")):
        return "attention"
    if lowered.startswith("triton_tem") or any(tag in lowered for tag in ("gemm", "cutlass", "xmma", "nvjet")):
        return "gemm"
    return "other"


def compiled(module: nn.Module) -> Callable[..., torch.Tensor]:
    """Static shapes, frozen weights (constant-folded, as export's AOTInductor packages are)."""
    return torch.compile(module, dynamic=False, options={"freezing": True})


def kernel_breakdown(fn: Callable[[], Any], reps: int) -> dict[str, float]:
    """ms per call by kernel class, device time summed from the profiler over ``reps`` calls."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    names: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            ms = event.time_range.elapsed_us() / 1000 / reps
            totals[kernel_class(event.name)] += ms
            names[event.name] += ms
    log.info("  kernels by class, ms a call: %s", {k: round(v, 4) for k, v in totals.items()})
    for name, ms in sorted(names.items(), key=lambda item: -item[1])[:12]:
        log.info("  %.4f ms  [%s] %s", ms, kernel_class(name), name[:110])
    return dict(totals)


def _torchao_int8(model: nn.Module) -> None:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    quantize_(model, Int8DynamicActivationInt8WeightConfig())


def _torchao_fp8_rowwise(model: nn.Module) -> None:
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_

    quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()))


def model_recipes() -> dict[str, tuple[torch.dtype, Callable[[nn.Module], object]]]:
    """name -> (weight dtype, in-place rewrite). torchao's fp8 row-wise recipe takes bf16 weights only."""
    from export.fusion import fuse_gelu_epilogues

    return {
        "fp16": (torch.half, lambda m: None),
        "fp16 GELU epilogue": (torch.half, fuse_gelu_epilogues),
        "int8 torchao dynamic": (torch.half, _torchao_int8),
        "bf16": (torch.bfloat16, lambda m: None),
        "fp8 torchao dynamic rowwise": (torch.bfloat16, _torchao_fp8_rowwise),
    }


def probe_model(batch: int, seq: int, reps: int, names: list[str]) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (batch, seq), generator=g).cuda()
    mask = torch.ones_like(ids)
    fp32 = bert_base().cuda()
    with torch.no_grad():
        reference = fp32(ids, mask)
    recipes = model_recipes()
    results: dict[str, Any] = {}
    for name in names:
        dtype, rewrite = recipes[name]
        model = bert_base().to(dtype).cuda()
        try:
            rewrite(model)
            fn = compiled(model)
            with torch.no_grad():
                out = fn(ids, mask)
                ms = graph_ms(lambda: fn(ids, mask), reps=5, replays=20)  # noqa: B023 (called in this iteration)
                classes = kernel_breakdown(lambda: fn(ids, mask), reps)  # noqa: B023
        except Exception as e:  # a recipe that does not compile here is a result too
            log.warning("%s failed: %s", name, e)
            results[name] = {"error": str(e)[:500]}
            continue
        finally:
            torch._dynamo.reset()
        cosine = min_cosine(out, reference)
        results[name] = {"ms": ms, "seq_per_s": batch / ms * 1000, "min_cosine": cosine, "kernels_ms": classes}
        log.info("%s: %.3f ms (%.0f seq/s), min cos %.5f (kernels above)", name, ms, batch / ms * 1000, cosine)
    return results


def amdahl(model: dict[str, Any], gemms: list[dict[str, Any]]) -> dict[str, float]:
    """Best speed-up over fp16 if only the GEMM kernels change, by the measured whole-linear speed-ups."""
    fp16 = model.get("fp16", {})
    if "ms" not in fp16 or not gemms:
        return {}
    gemm_ms = fp16["kernels_ms"].get("gemm", 0.0)
    rest_ms = fp16["ms"] - gemm_ms  # everything else the graph replay costs, idle gaps included
    if rest_ms <= 0 or not gemm_ms:
        log.warning("no bound: GEMM kernels %.3f ms of a %.3f ms model", gemm_ms, fp16["ms"])
        return {}

    def layer_ms(variant: str) -> float:  # 0 unless the variant ran at every shape
        rows = [r for r in gemms if r["variant"] == variant]
        return sum(r["ms"] * r["per_layer"] for r in rows) if len(rows) == len(LINEARS) else 0.0

    base = layer_ms("fp16 cuBLAS")
    if not base:
        return {}
    bounds = {"gemm_share": gemm_ms / fp16["ms"]}
    for variant in ("int8 linear max-autotune", "fp8 linear max-autotune", "int8 GEMM cuBLAS", "fp8 GEMM rowwise"):
        if not layer_ms(variant):
            continue
        speedup = base / layer_ms(variant)
        bounds[f"{variant}: layer GEMM speed-up"] = speedup
        bounds[f"{variant}: model bound"] = fp16["ms"] / (rest_ms + gemm_ms / speedup)
    bounds["GEMMs free: model bound"] = fp16["ms"] / rest_ms
    return bounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--output-dir", type=Path, default=Path("reports"))
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    parser.add_argument("--skip-gemms", action="store_true", help="time the whole models only")
    args = parser.parse_args()
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        parser.error(f"unknown --models {sorted(unknown)}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    args.output_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "batch": args.batch, "seq": args.seq}  # fmt: skip

    def write() -> None:  # after every stage, so that a run cut short keeps what it measured
        (args.output_dir / "quant-probe.json").write_text(json.dumps(report, indent=2))

    report["gemms"] = [] if args.skip_gemms else probe_gemms(args.batch * args.seq, args.reps)
    write()
    report["model"] = probe_model(args.batch, args.seq, args.reps, args.models.split(","))
    write()
    report["bounds"] = amdahl(report["model"], [r for r in report["gemms"] if "ms" in r])
    write()
    for key, value in report["bounds"].items():
        log.info("%-48s %.3f", key, value)


if __name__ == "__main__":
    main()
