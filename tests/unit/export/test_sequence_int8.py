"""int8 for the rerank and classify tasks at export: the encoder's recipes on a tiny sequence classifier, gated on
order and labels against fp32, the package beside fp32's, and the serving rule deciding which one the model loads."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from export import classify, quantize, rerank, sequence_gates, sequence_int8
from export.config import ExportConfig
from export.errors import AccuracyGateError, ConfigError
from tests.unit.export.test_rerank_export import tiny_classifier

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def tiny_reranker(tmp_path_factory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("tiny-cross-encoder"))


def _cfg(model: Path, out: Path, task: str = "rerank", **kw) -> ExportConfig:
    return ExportConfig(
        model=str(model), task=task, precisions=("fp32", "int8"), max_batch=8, max_seq=32, output=out, **kw
    )


@pytest.fixture(scope="module")
def int8_repository(tiny_reranker, tmp_path_factory) -> Path:
    return rerank.run(_cfg(tiny_reranker, tmp_path_factory.mktemp("rerank-int8") / "repo", serve="int8"))


def test_the_heads_stay_fp32():
    from transformers import BertConfig, BertForSequenceClassification

    from export.cross_encoder import CrossEncoder
    from tests.unit.conftest import TINY

    names = set(quantize._quantizable_linears(CrossEncoder(BertForSequenceClassification(BertConfig(**TINY)))))
    assert names and all(".encoder.layer." in n for n in names)
    assert not any("pooler" in n or "classifier" in n for n in names)


def test_both_packages_ship_and_the_manifest_carries_the_int8_gate(int8_repository):
    manifest = json.loads((int8_repository / "rerank" / "manifest.json").read_text())
    assert manifest["precision"] == "int8" and manifest["recipe"] == manifest["accuracy"]["int8"]["tried"][-1]["recipe"]
    assert manifest["packages"] == {"fp32": "1/model.pt2", "int8": f"1/{sequence_int8.INT8_FILE}"}
    assert manifest["artifacts"]["aoti"]["file"] == manifest["packages"]["int8"]
    assert all(f in manifest["files"] for f in manifest["packages"].values())
    int8 = manifest["accuracy"]["int8"]
    for figures in (int8["eager"], int8["aoti"]):
        assert figures["lists"] == 50 and figures["passed"] and figures["gate"] == sequence_gates.RERANK_MIN
        assert figures["spearman_mean"] >= 0.99 and figures["top1"] >= 0.96 and figures["max_abs_diff"] > 0
    assert manifest["compile_report"]["served"] == {"precision": "int8", "reason": "export --serve int8"}
    assert set(manifest["compile_report"]["seconds"]) == {"fp32", "int8"}
    index = json.loads((int8_repository / "repository.json").read_text())
    assert index["served"] == {"rerank": "int8"}


def test_an_int8_that_fails_the_gate_is_not_served(tiny_reranker, tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sequence_gates.RERANK_MIN, "spearman_mean", 1.01)  # nothing int8 computes can pass
    with caplog.at_level(logging.WARNING, logger="export.sequence_int8"):
        repo = rerank.run(_cfg(tiny_reranker, tmp_path / "r"))
    manifest = json.loads((repo / "rerank" / "manifest.json").read_text())
    assert manifest["precision"] == "fp32" and manifest["packages"] == {"fp32": "1/model.pt2"}
    assert not (repo / "rerank" / "1" / sequence_int8.INT8_FILE).exists()
    reason = manifest["compile_report"]["served"]["reason"]
    assert "fp32 is the only precision that passed the rerank gate" in reason
    assert "int8 may not serve rerank" in reason and "rerank spearman_mean" in reason
    assert "int8 may not serve" in caplog.text
    with pytest.raises(AccuracyGateError, match="spearman_mean"):
        rerank.run(_cfg(tiny_reranker, tmp_path / "forced", serve="int8"))
    assert not (tmp_path / "forced").exists()


def test_a_classifier_is_gated_on_its_labels(tmp_path):
    model = tiny_classifier(tmp_path / "three", labels=3)
    repo = classify.run(_cfg(model, tmp_path / "c", task="classify", serve="int8"))
    manifest = json.loads((repo / "classify" / "manifest.json").read_text())
    figures = manifest["accuracy"]["int8"]["aoti"]
    assert figures["texts"] >= 300 and figures["gate"] == sequence_gates.LABEL_MIN
    assert figures["label_agreement"] >= 0.99 and manifest["precision"] == "int8"


def test_a_recipe_that_cannot_take_three_inputs_is_refused(tiny_reranker, tmp_path):
    with pytest.raises(ConfigError, match="cannot serve a sequence task"):
        rerank.run(_cfg(tiny_reranker, tmp_path / "r", int8_recipe="pt2e_x86_int8_smoothquant"))


def test_a_spec_takes_int8_for_its_reranker(tiny_reranker, tmp_path):
    from export import several
    from serving.contract.manifest import read, verify

    cfg = ExportConfig(
        model=(f"scorer={tiny_reranker},task=rerank,precision=int8",),  # int8 alone: no fp32 package
        max_batch=8,
        max_seq=32,
        output=tmp_path / "several",
    )
    repo = several.run(cfg, lambda c: "rerank")
    index = json.loads((repo / "repository.json").read_text())
    assert index["served"] == {"scorer": "int8"} and index["models"]["scorer"]["task"] == "rerank"
    manifest = read(repo / "scorer")
    assert manifest["model"] == "scorer" and manifest["artifacts"]["aoti"]["file"] == f"1/{sequence_int8.INT8_FILE}"
    assert manifest["packages"] == {"int8": f"1/{sequence_int8.INT8_FILE}"}
    verify(repo / "scorer", manifest)
