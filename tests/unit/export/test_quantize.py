"""int8 recipes on a tiny random BERT: each applies to a copy, keeps the contract, and stays close to fp32."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from export import quantize
from export.verify import MIN_COSINE
from tests.unit.export.tiny_bert import HIDDEN, TinyEncoder, tiny_encoder, token_batch

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def encoder() -> TinyEncoder:
    return tiny_encoder()


@pytest.fixture(scope="module")
def calibration() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [token_batch(seed, 2, 12) for seed in range(3)]


def _through_aoti(quantized, encoder, package):
    """The quantized encoder compiled into ``package`` as export compiles it: its eager, AOTInductor and fp32
    outputs on one padded batch."""
    from export import artifacts as art
    from serving.contract.artifacts import load_module

    art.compile_aoti(art.export_program(quantized, "cpu", 4, 32), package)
    compiled = load_module(quantize.AOTI, package, "cpu")
    inputs = token_batch(7, 3, 24)
    with torch.inference_mode():
        return quantized(*inputs), compiled(*inputs), encoder(*inputs)


@pytest.mark.parametrize("recipe", quantize.RECIPES, ids=lambda r: r.name)
def test_recipe_applies_to_a_copy_and_stays_close(encoder, calibration, recipe) -> None:
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    quantized = recipe.apply(encoder, calibration)

    assert quantized is not encoder
    after = encoder.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)

    inputs = token_batch(99, 3, 16)
    with torch.inference_mode():
        ref, out = encoder(*inputs), quantized(*inputs)
    assert out.shape == (3, HIDDEN)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
    assert F.cosine_similarity(ref, out).min().item() > 0.9


@pytest.mark.parametrize(
    "recipe", [r for r in quantize.RECIPES if quantize.TORCHSCRIPT in r.paths], ids=lambda r: r.name
)
def test_torchscript_trace_matches_eager(encoder, calibration, recipe) -> None:
    quantized = recipe.apply(encoder, calibration)
    with torch.inference_mode():
        traced = torch.jit.trace(quantized, token_batch(5, 1, 16), check_trace=False)
        other = token_batch(7, 2, 24)
        torch.testing.assert_close(traced(*other), quantized(*other))


@pytest.mark.parametrize(
    "recipe", [r for r in quantize.RECIPES if quantize.EXPORTED_PROGRAM in r.paths], ids=lambda r: r.name
)
def test_torch_export_matches_eager(encoder, calibration, recipe) -> None:
    quantized = recipe.apply(encoder, calibration)
    inputs = token_batch(5, 2, 16)
    program = torch.export.export(quantized, inputs)
    with torch.inference_mode():
        torch.testing.assert_close(program.module()(*inputs), quantized(*inputs))


def test_get_recipe() -> None:
    first = quantize.RECIPES[0]
    assert quantize.get_recipe(first.name) is first
    with pytest.raises(ValueError, match=first.name):
        quantize.get_recipe("no_such_recipe")


def test_recipe_paths_and_devices_are_known() -> None:
    known = {quantize.EXPORTED_PROGRAM, quantize.AOTI, quantize.TORCHSCRIPT, quantize.ONNX}
    for recipe in quantize.RECIPES:
        assert recipe.paths and recipe.paths <= known
        assert recipe.devices and recipe.devices <= {"cpu", "cuda"}


def test_pt2e_recipe_compiles_to_onednn_int8_and_matches_its_eager_graph(encoder, calibration, tmp_path) -> None:
    quantized = quantize.get_recipe("pt2e_x86_int8_smoothquant").apply(encoder, calibration).eval()
    package = tmp_path / "int8.aoti.pt2"
    eager, aoti, ref = _through_aoti(quantized, encoder, package)
    assert F.cosine_similarity(eager, aoti).min().item() > 0.999
    assert F.cosine_similarity(ref, aoti).min().item() > 0.9
    assert "qlinear" in package.read_bytes().decode("latin-1")  # oneDNN's int8 Linear, not torchao's _int_mm


def test_smoothing_leaves_the_fp32_function_unchanged(encoder, calibration) -> None:
    smoothed = quantize.smooth_and_split(copy.deepcopy(encoder), calibration)

    kinds = {type(m) for m in smoothed.modules()}
    assert {quantize.SmoothedLinear, quantize.OutlierSplitLinear} <= kinds
    inputs = token_batch(11, 3, 16)
    with torch.inference_mode():
        torch.testing.assert_close(smoothed(*inputs), encoder(*inputs), atol=1e-5, rtol=0)


def test_smoothing_scale_balances_activation_and_weight_ranges() -> None:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(32, 16, generator=gen)
    x_absmax = torch.rand(16, generator=gen) + 0.1
    x_absmax[3] = 80.0  # one massive activation channel
    scale = quantize.smoothing_scale(x_absmax, weight, alpha=0.5)

    linear = torch.nn.Linear(16, 32)
    linear.weight.data.copy_(weight)
    smoothed = quantize.SmoothedLinear(linear, scale)
    # alpha 0.5: after smoothing, each input channel's activation range equals its weight column's range.
    torch.testing.assert_close(x_absmax * smoothed.inv_scale, smoothed.linear.weight.abs().amax(0))
    assert (x_absmax * smoothed.inv_scale).max() < x_absmax.max() / 4
    x = torch.randn(5, 16, generator=gen)
    torch.testing.assert_close(smoothed(x), linear(x), atol=1e-5, rtol=0)


def test_smoothquant_passes_the_int8_gate(encoder, calibration) -> None:
    quantized = quantize.get_recipe("torchao_int8_smoothquant").apply(encoder, calibration)
    inner = [m.linear for m in quantized.modules() if isinstance(m, quantize.SmoothedLinear)]
    inner += [m.main for m in quantized.modules() if isinstance(m, quantize.OutlierSplitLinear)]
    assert len(inner) == 2 * 6  # every encoder Linear: Q, K, V, attention output, FFN in and out per layer
    assert all(type(m.weight) not in (torch.Tensor, torch.nn.Parameter) for m in inner)  # torchao int8 tensors
    inputs = token_batch(23, 4, 20)
    with torch.inference_mode():
        cos = F.cosine_similarity(encoder(*inputs), quantized(*inputs))
    assert cos.min().item() >= MIN_COSINE["int8"]


def test_int8_linear_stays_close_to_fp32_and_keeps_shape() -> None:
    gen = torch.Generator().manual_seed(3)
    linear = torch.nn.Linear(48, 96)
    x = torch.randn(2, 7, 48, generator=gen) + 0.5  # off-centre: the activation zero point matters
    x[0, 0, 5] = 40.0  # one massive activation on one token: per-token scales keep it from the other tokens
    with torch.inference_mode():
        ref, out = linear(x), quantize.Int8Linear(linear)(x)
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert F.cosine_similarity(ref.flatten(0, 1), out.flatten(0, 1)).min().item() > 0.999


def test_int8_linear_exports_to_onednn_with_u8_activations_and_a_weight_to_pack() -> None:
    """Given s8 activations, oneDNN's AVX2 GEMM recomputes the weight's column sums on every call (4x slower at 16
    rows): the exported graph hands it u8 ones, and the weight through ``qlinear_prepack``, which freezing folds."""
    module = torch.nn.Sequential(quantize.Int8Linear(torch.nn.Linear(48, 96))).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    with torch.no_grad():
        graph = torch.export.export(module, (torch.randn(2, 5, 48),), dynamic_shapes=({0: batch},)).graph
    calls = [n for n in graph.nodes if n.target is torch.ops.onednn.qlinear_pointwise.default]
    assert len(calls) == 1
    activations, packed = calls[0].args[0], calls[0].args[3]
    assert activations.meta["val"].dtype == torch.uint8
    assert packed.target is torch.ops.onednn.qlinear_prepack.default and packed.meta["val"].shape == (48, 96)


def _onednn_int8_linear(x: torch.Tensor, qweight: torch.Tensor) -> torch.Tensor:
    """x [M, K] uint8 times qweight [N, K] int8 through oneDNN's packed int8 Linear, the kernel a compiled int8
    package runs; unit scales, so the result is the integer product as this CPU computes it."""
    packed = torch.ops.onednn.qlinear_prepack(qweight, list(x.shape))
    n = qweight.shape[0]
    ones, zeros = torch.ones(n), torch.zeros(n, dtype=torch.long)
    return torch.ops.onednn.qlinear_pointwise(
        x, 1.0, 0, packed, ones, zeros, None, 1.0, 0, torch.float32, "none", [None], ""
    )


def _saturating_activations(qweight: torch.Tensor) -> torch.Tensor:
    """The u8 activations with the largest products: 255 everywhere, so each product is 255 times a weight."""
    return torch.full((4, qweight.shape[1]), 255, dtype=torch.uint8)


def _int8_linear_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """The [N, K] int8 weights of a model's :class:`quantize.Int8Linear` modules."""
    return [m.qweight for m in model.modules() if isinstance(m, quantize.Int8Linear)]


@pytest.mark.parametrize("source", ["random_linear", "int8_onednn_smoothquant"])
def test_int8_linear_weights_give_the_exact_product_in_this_cpus_int8_gemm(encoder, calibration, source) -> None:
    # Without VNNI, oneDNN adds products in pairs in int16: full-range weights saturate there (quantize.reduce_range).
    if source == "random_linear":
        gen = torch.Generator().manual_seed(5)
        linear = torch.nn.Linear(HIDDEN, 2 * HIDDEN)
        linear.weight.data.copy_(torch.randn(2 * HIDDEN, HIDDEN, generator=gen))
        weights = _int8_linear_weights(quantize.Int8Linear(linear))
    else:
        weights = _int8_linear_weights(quantize.get_recipe(source).apply(encoder, calibration))
    assert weights
    for qweight in weights:
        x = _saturating_activations(qweight)
        exact = x.double() @ qweight.double().t()
        assert torch.equal(_onednn_int8_linear(x, qweight).double(), exact)


def _assert_compiles_to_onednn_int8(quantized, encoder, package) -> None:
    """Compiled, the quantized encoder matches its eager self, stays inside the int8 gate, and calls oneDNN's int8
    Linear over packed weights, not ATen's ``_int_mm``."""
    eager, aoti, ref = _through_aoti(quantized, encoder, package)
    assert F.cosine_similarity(eager, aoti).min().item() > 0.999
    assert F.cosine_similarity(ref, aoti).min().item() >= MIN_COSINE["int8"]
    source = package.read_bytes().decode("latin-1")
    assert "qlinear_pointwise" in source and "aoti_torch_cpu__int_mm_out" not in source


def test_onednn_recipe_compiles_every_linear_to_onednn_int8(encoder, calibration, tmp_path) -> None:
    quantized = quantize.get_recipe("int8_onednn_smoothquant").apply(encoder, calibration).eval()
    int8 = [n for n, m in quantized.named_modules() if isinstance(m, quantize.Int8Linear)]
    assert len(int8) == 6 * 2  # Q, K, V, attention output, FFN in and out per layer
    _assert_compiles_to_onednn_int8(quantized, encoder, tmp_path / "int8.aoti.pt2")


@pytest.mark.skipif(not quantize.bf16_supported(), reason="the mixed recipe needs a CPU that multiplies bf16 natively")
def test_mixed_recipe_compiles_query_and_key_to_onednn_int8(encoder, calibration, tmp_path) -> None:
    quantized = quantize.get_recipe("int8_qk_bf16").apply(encoder, calibration).eval()
    int8 = [n for n, m in quantized.named_modules() if isinstance(m, quantize.Int8Linear)]
    bf16 = [n for n, m in quantized.named_modules() if isinstance(m, quantize.Bf16Linear)]
    assert len(int8) == 2 * 2 and all(quantize.base_name(n).endswith(quantize.INT8_ATTENTION) for n in int8)
    assert len(bf16) == 4 * 2  # value, attention output, FFN in and out per layer
    _assert_compiles_to_onednn_int8(quantized, encoder, tmp_path / "int8.aoti.pt2")
