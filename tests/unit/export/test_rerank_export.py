"""The rerank task at export: a cross-encoder traced with token_type_ids, gated against transformers, and the
repository contract (manifest: task, pooling, head, labels; config: QUERY, DOCUMENTS -> SCORES)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from export import cross_encoder, model_configs, native_tokenizer, rerank, tasks
from export.__main__ import _task
from export.checkpoint import minilm_path
from export.config import DEFAULT_DEADLINE_US, DEFAULT_STANDING_QUEUE_US, ExportConfig
from export.errors import ConfigError
from tests.unit.conftest import TINY


def tiny_classifier(path: Path, labels: int = 1, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    model = BertForSequenceClassification(BertConfig(**TINY, num_labels=labels))
    model.config.architectures = ["BertForSequenceClassification"]
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(str(minilm_path())).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_reranker(tmp_path_factory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.fixture(scope="module")
def rerank_repository(tiny_reranker, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rerank-export") / "repo"
    cfg = ExportConfig(
        model=str(tiny_reranker), task="rerank", precisions=("fp32",), max_batch=4, max_seq=32, output=out
    )
    return rerank.run(cfg)


def test_the_task_comes_from_the_checkpoint(tiny_reranker, tiny_checkpoint, tmp_path):
    assert tasks.detect(tiny_reranker) == "rerank"
    assert tasks.detect(tiny_checkpoint) == "embed"
    three = tiny_classifier(tmp_path / "three", labels=3)
    assert tasks.detect(three) == "classify"  # a classifier, not a reranker
    with pytest.raises(ConfigError, match="one label .* has 3"):
        tasks.check("rerank", three)
    with pytest.raises(ConfigError, match="needs a BertForSequenceClassification"):
        tasks.check("rerank", tiny_checkpoint)
    assert _task(ExportConfig(model=str(tiny_reranker))) == "rerank"
    assert _task(ExportConfig(model="minilm")) == "embed"
    assert _task(ExportConfig(model=tasks.SEEDED_CROSS_ENCODER)) == "rerank"
    with pytest.raises(ConfigError, match="unknown task 'score'"):
        ExportConfig(task="score")


def test_the_seeded_cross_encoder_is_deterministic(tmp_path):
    a = cross_encoder.build_seeded(tmp_path / "a")
    torch.manual_seed(1234)  # whatever ran before does not change it
    b = cross_encoder.build_seeded(tmp_path / "b")
    wa, wb = cross_encoder.load(a).state_dict(), cross_encoder.load(b).state_dict()
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert tasks.detect(a) == "rerank" and wa["classifier.weight"].shape == (1, 384)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()


def test_the_seeded_bert_base_cross_encoder_has_bert_bases_shape_and_is_deterministic(tmp_path):
    a = cross_encoder.build_seeded(tmp_path / "a", body="bert-base")
    b = cross_encoder.build_seeded(tmp_path / "b", body="bert-base")
    ma, mb = cross_encoder.load(a), cross_encoder.load(b)
    assert (ma.config.num_hidden_layers, ma.config.hidden_size, ma.config.num_labels) == (12, 768, 1)
    assert ma.config.vocab_size == len(AutoTokenizer.from_pretrained(str(a)))
    wa, wb = ma.state_dict(), mb.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    with pytest.raises(ValueError, match="minilm or bert-base"):
        cross_encoder.build_seeded(tmp_path / "c", body="bert-large")


def test_the_manifest_records_the_task_and_the_gate(rerank_repository):
    manifest = json.loads((rerank_repository / "rerank" / "manifest.json").read_text())
    assert manifest["task"] == "rerank"
    assert (manifest["pooling"], manifest["head"], manifest["labels"]) == ("cls", "pooler+linear", {"0": "LABEL_0"})
    assert manifest["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert manifest["compile_report"]["dynamo"] == {"graphs": 1, "graph_breaks": 0}
    assert manifest["accuracy"]["fp32"]["max_abs_score_diff"] <= rerank.MAX_ABS_DIFF
    for rel in (manifest["artifacts"]["aoti"]["file"], manifest["tokenizer"]):
        assert rel in manifest["files"]
    index = json.loads((rerank_repository / "repository.json").read_text())
    assert index["models"] == {"rerank": {"backend": "bertserve", "task": "rerank"}}


def test_the_config_takes_a_query_and_documents(rerank_repository):
    text = (rerank_repository / "rerank" / "config.pbtxt").read_text()
    for piece in ('name: "QUERY"', 'name: "DOCUMENTS"', 'name: "SCORES"', 'backend: "bertserve"', '"rerank"'):
        assert piece in text, piece
    # admitted by the backend's scheduler against the CPU's default deadline, as the native encoder is
    params = model_configs.parse(text).parameters
    assert params["deadline_us"].string_value == str(DEFAULT_DEADLINE_US["cpu"])
    assert params["standing_queue_us"].string_value == str(DEFAULT_STANDING_QUEUE_US["cpu"])


def drift(monkeypatch) -> None:
    """Every artifact the export loads back answers 1e-3 off what it computes."""
    real = rerank.load_module

    def drifting(*args, **kwargs):
        module = real(*args, **kwargs)
        return lambda *inputs: module(*inputs) + 1e-3

    monkeypatch.setattr(rerank, "load_module", drifting)


def test_the_gate_refuses_scores_that_differ(tiny_reranker, monkeypatch, tmp_path):
    """An artifact whose scores drift past 1e-4 from transformers' stops the export."""
    drift(monkeypatch)
    cfg = ExportConfig(
        model=str(tiny_reranker), task="rerank", precisions=("fp32",), max_batch=2, max_seq=16, output=tmp_path / "r"
    )
    with pytest.raises(rerank.ScoreGateError, match="above the gate"):
        rerank.run(cfg)
    assert not (tmp_path / "r").exists()


def test_pair_template_rules_match_the_native_tokenizer(tiny_reranker):
    spec = json.loads((tiny_reranker / "tokenizer.json").read_text())
    assert native_tokenizer.pair_unsupported(spec) is None
    spec["post_processor"]["pair"] = [p for p in spec["post_processor"]["pair"] if "SpecialToken" in p]
    assert native_tokenizer.pair_unsupported(spec) == "a pair template other than $A then $B"


def test_the_python_encoder_backend_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="native backend only"):
        rerank.run(ExportConfig(task="rerank", encoder_backend="python", output=tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_fp32_on_cuda_traces_attentions_math_kernel_and_nothing_else_is_changed():
    """The memory-efficient kernel's padded-mask guard failed torch.export of fp32 on CUDA (seq dynamic)."""
    module = torch.nn.Linear(2, 2)
    assert type(rerank._attention(module, "cpu")).__name__ == "nullcontext"
    assert type(rerank._attention(module.half(), "cuda:0")).__name__ == "nullcontext"
    with rerank._attention(module.float(), "cuda:0"):
        cuda = torch.backends.cuda
        assert (cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled(), cuda.math_sdp_enabled()) == (
            False,
            False,
            True,
        )
    assert torch.backends.cuda.mem_efficient_sdp_enabled()
