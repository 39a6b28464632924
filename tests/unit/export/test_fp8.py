"""fp8 (e4m3, row-wise scales) on a tiny random BERT, on the CPU's reference _scaled_mm: the layer stays close to
its Linear, the encoder to fp32, and torch.export takes it with dynamic batch and length (what AOTInductor builds
from). Speed is measured on a GPU only (bench/gpu_chain.sh)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

from export import fp8
from export.config import ExportConfig
from export.errors import ConfigError
from export.verify import MIN_COSINE
from tests.unit.export.tiny_bert import TinyEncoder, tiny_encoder, token_batch

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def encoder() -> TinyEncoder:
    return tiny_encoder()


def test_linear_stays_close_to_its_linear() -> None:
    torch.manual_seed(1)
    linear = torch.nn.Linear(64, 96)
    x = torch.randn(5, 7, 64)
    with torch.inference_mode():
        want, got = linear(x), fp8.Float8Linear(linear)(x.to(torch.bfloat16)).float()
    assert got.shape == want.shape
    # e4m3 keeps 3 mantissa bits: a relative error of a few per cent per GEMM, not more
    assert (got - want).norm() / want.norm() < 0.05
    assert F.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.998


def test_quantize_rows_round_trips_each_rows_range() -> None:
    x = torch.tensor([[1.0, -2.0, 0.5], [1000.0, 3.0, -1000.0], [0.0, 0.0, 0.0]])
    q, scale = fp8.quantize_rows(x)
    assert q.dtype == fp8.FP8 and scale.shape == (3, 1)
    assert (q.float() * scale).abs().amax(dim=1).tolist() == pytest.approx([2.0, 1000.0, 0.0])  # row max exact
    assert torch.isfinite(scale).all()


def test_linear_refuses_shapes_the_gemm_cannot_take() -> None:
    with pytest.raises(ValueError, match="divisible by 16"):
        fp8.Float8Linear(torch.nn.Linear(64, 10))


def test_quantized_encoder_keeps_the_embeddings(encoder) -> None:
    quantized = fp8.quantize(copy.deepcopy(encoder))
    assert not any(isinstance(m, torch.nn.Linear) for m in quantized.modules())
    assert any(isinstance(m, fp8.Float8Linear) for m in quantized.modules())
    assert any(isinstance(m, torch.nn.Linear) for m in encoder.modules()), "the original must stay untouched"
    inputs = token_batch(3, 4, 20)
    with torch.inference_mode():
        cosine = F.cosine_similarity(quantized(*inputs), encoder(*inputs), dim=-1)
    assert cosine.min() >= MIN_COSINE["fp8"]


def test_torch_export_takes_dynamic_batch_and_length(encoder) -> None:
    quantized = fp8.quantize(copy.deepcopy(encoder))
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=32)
    program = torch.export.export(
        quantized, token_batch(5, 2, 16), dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq})
    )
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "aten._scaled_mm.default" in ops
    other = token_batch(6, 3, 24)
    with torch.inference_mode():
        torch.testing.assert_close(program.module()(*other), quantized(*other))


def test_fp8_needs_a_cuda_target() -> None:
    with pytest.raises(ConfigError, match="fp8 needs --target cuda"):
        ExportConfig(target="cpu", precisions=("fp32", "fp8"))
    assert fp8.unsupported("cpu") == "fp8 needs --target cuda"
    assert ExportConfig(target="cuda", precisions=("fp16", "fp8")).precisions == ("fp16", "fp8")


def test_ffn_only_leaves_attention_in_bf16(encoder) -> None:
    quantized = fp8.quantize(copy.deepcopy(encoder), fp8.ffn_only)
    fp8_names = {n for n, m in quantized.named_modules() if isinstance(m, fp8.Float8Linear)}
    assert fp8_names == {
        f"bert.encoder.layer.{i}.{part}.dense" for i in range(2) for part in ("intermediate", "output")
    }
    kept = {n for n, m in quantized.named_modules() if isinstance(m, torch.nn.Linear)}
    assert "bert.encoder.layer.0.attention.output.dense" in kept and "bert.encoder.layer.0.attention.self.query" in kept
    assert all(m.weight.dtype == torch.bfloat16 for m in quantized.modules() if isinstance(m, torch.nn.Linear))
