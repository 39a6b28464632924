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


@pytest.mark.parametrize("act", ["relu", "gelu_new"])
def test_other_activations_are_left_alone(act: str) -> None:
    # gelu_new is already the tanh form, but the rewrite only takes what it can reproduce from the exact GELU
    encoder = _encoder(hidden_act=act)
    assert fuse_gelu_epilogues(encoder) == 0


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
