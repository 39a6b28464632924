"""The FFN GELU epilogue rewrite: which modules it takes, the CPU path unchanged, the CUDA path close to eager."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import BertConfig, BertModel

from export import artifacts as art
from export.encoder import Encoder
from export.fusion import GeluLinear, fuse_gelu_epilogues
from tests.unit.conftest import TINY


def _encoder(**overrides: object) -> Encoder:
    torch.manual_seed(0)
    return Encoder(BertModel(BertConfig(**{**TINY, **overrides}), add_pooling_layer=False)).eval()


def _inputs(batch: int = 3, seq: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1000, 2000, (batch, seq), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[-1, seq // 2 :] = 0
    return ids, mask


def test_every_exact_gelu_intermediate_is_replaced_and_the_cpu_path_is_unchanged() -> None:
    encoder = _encoder()
    fused = copy.deepcopy(encoder)
    assert fuse_gelu_epilogues(fused) == TINY["num_hidden_layers"]
    layers = fused.bert.encoder.layer
    assert all(isinstance(layer.intermediate, GeluLinear) for layer in layers)
    assert fuse_gelu_epilogues(fused) == 0  # nothing left to take
    with torch.no_grad():
        torch.testing.assert_close(fused(*_inputs()), encoder(*_inputs()), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("act", "taken"), [("gelu_new", True), ("gelu_pytorch_tanh", True), ("relu", False), ("gelu_python", False)]
)
def test_which_activations_are_taken(act: str, taken: bool) -> None:
    # the tanh GELUs are the epilogue's own form; anything not a GELU, or a Python GELU, stays as it is
    encoder = _encoder(hidden_act=act)
    assert fuse_gelu_epilogues(encoder) == (TINY["num_hidden_layers"] if taken else 0)


def test_a_linear_without_bias_is_left_alone() -> None:
    encoder = _encoder()
    encoder.bert.encoder.layer[0].intermediate.dense.bias = None
    assert fuse_gelu_epilogues(encoder) == TINY["num_hidden_layers"] - 1
    assert not isinstance(encoder.bert.encoder.layer[0].intermediate, GeluLinear)


def test_the_fused_module_exports_on_cpu() -> None:
    fused = _encoder()
    fuse_gelu_epilogues(fused)
    ep = art.export_program(fused, "cpu", 4, 16)
    ids, mask = _inputs(2, 10)
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(ids, mask), fused(ids, mask))


@pytest.mark.gpu
def test_cuda_epilogue_matches_eager_gelu() -> None:
    encoder = _encoder().cuda().half()
    fused = copy.deepcopy(encoder)
    fuse_gelu_epilogues(fused)
    ids, mask = (t.cuda() for t in _inputs())
    ep = art.export_program(fused, "cuda", 4, 16)
    targets = {str(n.target) for n in ep.graph_module.graph.nodes if n.op == "call_function"}
    assert "aten._addmm_activation.default" in targets
    with torch.no_grad():
        expected = encoder(ids, mask).float()
        got = fused(ids, mask).float()
    assert torch.nn.functional.cosine_similarity(got, expected).min() > 0.9999
