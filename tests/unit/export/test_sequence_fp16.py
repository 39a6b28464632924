"""fp16 for the rerank and classify tasks (CUDA at export): the half module's package gated on order and labels,
shipped when it passes, not shipped when it fails. Compiled and loaded here by stand-ins that keep the eager half
module (no CUDA on the test machine); the gate is the real one on the shipped lists. The seeded encoder scores a
list's documents within 1e-4 of each other (its [CLS] state hardly depends on the rest of the input): what half
precision moves there are ties (export/sequence_gates.py), and its package passes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from export import cross_encoder, rerank, sequence_fp16, sequence_gates, sequence_int8
from export.checkpoint import _tokenizer
from export.config import ExportConfig
from tests.unit.export.test_rerank_export import tiny_classifier

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
MAX_SEQ = 64  # the tiny encoder's positions


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[torch.nn.Module, object]:
    path = tiny_classifier(tmp_path_factory.mktemp("tiny-cross-encoder"))
    return rerank.RERANK.wrapper(cross_encoder.load(path)).eval(), _tokenizer(path)


def _compile_keeping(modules: dict[Path, torch.nn.Module]):
    def compile_to(module: torch.nn.Module, file: Path) -> None:
        file.write_bytes(b"package")
        modules[file] = module

    return compile_to


def test_a_half_package_that_keeps_the_order_ships(tiny, tmp_path):
    module, tokenizer = tiny
    gate = sequence_int8.judge("rerank", module, tokenizer, MAX_SEQ, 8)
    modules: dict[Path, torch.nn.Module] = {}
    half = sequence_fp16.build("rerank", module, gate, tmp_path, _compile_keeping(modules), lambda f: modules[f])
    assert half.refused is None and half.file == tmp_path / sequence_fp16.FP16_FILE and half.file.is_file()
    assert next(half.module.parameters()).dtype == torch.float16  # the package that serves is the half one
    assert half.figures.passed and half.figures.lists == 50 and 0 < half.figures.max_abs_diff < sequence_gates.TIE
    assert half.as_dict()["aoti"]["gate"] == sequence_gates.RERANK_MIN


def test_a_half_package_that_loses_the_order_is_not_shipped(tiny, tmp_path):
    module, _ = tiny
    failing = sequence_gates.RerankAgreement(50, 0.5, -0.2, 0.4, 0.3, 0.9)
    modules: dict[Path, torch.nn.Module] = {}
    half = sequence_fp16.build("rerank", module, lambda _: failing, tmp_path, _compile_keeping(modules), modules.get)
    assert half.module is None and half.file is None and not (tmp_path / sequence_fp16.FP16_FILE).exists()
    assert half.refused is not None and "fp16" in str(half.refused)
    assert half.as_dict()["refused"] == str(half.refused)


def test_fp16_is_exported_for_cuda_only():
    assert rerank._precisions(
        ExportConfig(task="rerank", target="cuda", precisions=("fp16", "fp32")), rerank.RERANK
    ) == (
        "fp16",
        "fp32",
    )
    cpu = ExportConfig(task="rerank", target="cpu", precisions=("fp32", "int8"))
    assert rerank._precisions(cpu, rerank.RERANK) == ("fp32", "int8")
