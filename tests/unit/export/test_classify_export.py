"""The classify task at export: a sequence classifier with several labels, traced with token_type_ids, gated
against transformers on single texts and pairs, and the repository contract (manifest: task, labels; config:
TEXT, TEXT_PAIR -> LOGITS, PROBABILITIES, LABEL, the labels as a parameter)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from export import classify, cross_encoder, rerank, tasks
from export.__main__ import _task
from export.config import ExportConfig
from export.errors import ConfigError
from tests.unit.export.test_rerank_export import drift, tiny_classifier

LABELS = {0: "spam", 1: "ham", 2: "eggs"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tiny_classifier(tmp_path_factory.mktemp("tiny-classifier"), labels=3)
    config = json.loads((path / "config.json").read_text())
    config["id2label"] = {str(k): v for k, v in LABELS.items()}
    config["label2id"] = {v: k for k, v in LABELS.items()}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def repository(tiny, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("classify-export") / "repo"
    cfg = ExportConfig(model=str(tiny), task="classify", precisions=("fp32",), max_batch=4, max_seq=32, output=out)
    return classify.run(cfg)


def test_the_task_comes_from_the_checkpoint(tiny, tiny_checkpoint, tmp_path):
    assert tasks.detect(tiny) == "classify"
    assert tasks.labels(tiny) == LABELS
    assert _task(ExportConfig(model=str(tiny))) == "classify"
    assert _task(ExportConfig(model=tasks.SEEDED_CLASSIFIER)) == "classify"
    assert ExportConfig(task="classify").task == "classify"
    with pytest.raises(ConfigError, match="needs two labels or more .* has 1"):
        tasks.check("classify", tiny_classifier(tmp_path / "one", labels=1))
    with pytest.raises(ConfigError, match="--task classify needs a BertForSequenceClassification"):
        tasks.check("classify", tiny_checkpoint)
    multi = tiny_classifier(tmp_path / "multi", labels=2)
    assert tasks.labels(multi) == {0: "LABEL_0", 1: "LABEL_1"}  # transformers writes no id2label for two
    config = json.loads((multi / "config.json").read_text())
    (multi / "config.json").write_text(json.dumps({**config, "problem_type": "multi_label_classification"}))
    with pytest.raises(ConfigError, match="multi_label_classification"):
        tasks.check("classify", multi)


def test_the_seeded_classifier_has_named_labels(tmp_path):
    a = cross_encoder.build_seeded(tmp_path / "a", labels=classify.SEEDED_LABELS)
    b = cross_encoder.build_seeded(tmp_path / "b", labels=classify.SEEDED_LABELS)
    wa, wb = cross_encoder.load(a).state_dict(), cross_encoder.load(b).state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert wa["classifier.weight"].shape == (3, 384)
    assert tasks.detect(a) == "classify" and tasks.labels(a) == classify.SEEDED_LABELS


def test_the_gate_covers_texts_and_pairs(tiny):
    from export.checkpoint import _tokenizer

    batches = classify.gate_batches(_tokenizer(tiny), 32)
    singles = [b for b in batches if int(b["token_type_ids"].max()) == 0]
    pairs = [b for b in batches if int(b["token_type_ids"].max()) == 1]
    assert singles and pairs


def test_the_manifest_records_the_task_labels_and_the_gate(repository):
    manifest = json.loads((repository / "classify" / "manifest.json").read_text())
    assert manifest["task"] == "classify" and manifest["model"] == "classify"
    assert manifest["labels"] == {str(k): v for k, v in LABELS.items()}
    assert manifest["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert manifest["compile_report"]["dynamo"] == {"graphs": 1, "graph_breaks": 0}
    assert manifest["accuracy"]["fp32"]["max_abs_logit_diff"] <= rerank.MAX_ABS_DIFF
    index = json.loads((repository / "repository.json").read_text())
    assert index["models"] == {"classify": {"backend": "bertserve", "task": "classify"}}


def test_the_config_takes_texts_and_pairs_and_names_the_labels(repository):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    config = text_format.Parse((repository / "classify" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert config.backend == "bertserve" and config.max_batch_size == 4
    inputs = {i.name: i for i in config.input}
    assert set(inputs) == {"TEXT", "TEXT_PAIR"} and inputs["TEXT_PAIR"].optional and not inputs["TEXT"].optional
    assert {o.name: list(o.dims) for o in config.output} == {"LOGITS": [3], "PROBABILITIES": [3], "LABEL": [1]}
    assert config.parameters["task"].string_value == "classify"
    assert json.loads(config.parameters["labels"].string_value) == ["spam", "ham", "eggs"]
    assert (repository / "classify" / "warmup" / "text").is_file()


def test_the_artifact_returns_every_logit(repository, tiny):
    from serving.contract.artifacts import AOTI, load_module

    module = load_module(AOTI, repository / "classify" / "1" / "model.pt2", "cpu", cuda_graphs=False)
    ids = torch.tensor([[101, 2000, 2001, 102, 2002, 102]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1]])
    with torch.inference_mode():
        got = module(ids, torch.ones_like(ids), types)
        expected = cross_encoder.load(tiny)(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=types)
    assert got.shape == (1, 3)
    assert float((got - expected.logits).abs().max()) <= rerank.MAX_ABS_DIFF


def test_the_gate_refuses_logits_that_differ(tiny, monkeypatch, tmp_path):
    drift(monkeypatch)
    cfg = ExportConfig(
        model=str(tiny), task="classify", precisions=("fp32",), max_batch=2, max_seq=16, output=tmp_path / "c"
    )
    with pytest.raises(rerank.ScoreGateError, match="classify aoti .* above the gate"):
        classify.run(cfg)
    assert not (tmp_path / "c").exists()
