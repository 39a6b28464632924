"""Where an fp32 package's Linears run on the CPU (artifacts.fp32_configs): oneDNN over packed weights, or ATen."""

from __future__ import annotations

import torch

from export import artifacts as art
from serving.contract.artifacts import AOTI, load_module
from tests.unit.export.tiny_bert import tiny_encoder, token_batch

AVX2 = frozenset({"avx", "avx2", "fma"})


def test_only_a_cpu_without_avx512_leaves_the_weights_unpacked(monkeypatch) -> None:
    monkeypatch.setattr(art, "cpu_flags", lambda: AVX2 | {"avx512f"})
    assert art.fp32_configs("cpu") == {}
    monkeypatch.setattr(art, "cpu_flags", lambda: AVX2)
    assert art.fp32_configs("cuda") == {}
    assert art.fp32_configs("cpu") == {"cpp.weight_prepack": False}
    assert art.fp32_configs("cpu", tuned=True) == {}  # tuning times its templates against the packed Linear


def test_an_unpacked_fp32_package_runs_atens_addmm_and_matches_eager(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(art, "cpu_flags", lambda: AVX2)
    encoder = tiny_encoder()
    package = tmp_path / "fp32.aoti.pt2"
    art.compile_aoti(art.export_program(encoder, "cpu", 4, 32), package, art.fp32_configs("cpu"))
    source = package.read_bytes().decode("latin-1")
    assert "aoti_torch_cpu_addmm_out" in source and "linear_pointwise" not in source
    inputs = token_batch(3, 3, 20)
    with torch.inference_mode():
        torch.testing.assert_close(load_module(AOTI, package, "cpu")(*inputs), encoder(*inputs), atol=1e-5, rtol=0)
