"""--model NAME=SPEC: the grammar, each spec's own options over the repository's, and the errors that name the fault."""

from __future__ import annotations

import pytest

from export import specs
from export.config import ExportConfig, parse_args
from export.errors import CheckpointError, ConfigError
from export.several import merged_index, plan


def _task(cfg: ExportConfig) -> str:
    return "rerank" if cfg.checkpoint == "minilm-cross-encoder" else "embed"


def test_a_plain_model_is_a_single_export_as_before():
    cfg = parse_args([])
    assert cfg.model == ("minilm",) and cfg.checkpoint == "minilm" and cfg.specs == ()
    assert parse_args(["--model", "/ckpt/dir"]).checkpoint == "/ckpt/dir"
    assert ExportConfig(model="bert-base").checkpoint == "bert-base"


def test_each_spec_keeps_its_name_checkpoint_and_settings():
    cfg = parse_args(["--model", "embed=minilm", "--model", "reranker=/ckpt/ce,task=rerank,precision=fp32,max_seq=256"])
    first, second = cfg.specs
    assert (first.name, first.checkpoint, first.settings) == ("embed", "minilm", ())
    assert (second.name, second.checkpoint) == ("reranker", "/ckpt/ce")
    assert dict(second.settings) == {"task": "rerank", "precision": "fp32", "max_seq": "256"}


def test_the_environment_takes_specs_separated_by_spaces(monkeypatch):
    monkeypatch.setenv("BERTSERVE_EXPORT_MODEL", "embed=minilm rerank=minilm-cross-encoder,task=rerank")
    assert [s.name for s in parse_args([]).specs] == ["embed", "rerank"]


def test_a_spec_sets_its_own_options_over_the_repository_ones():
    cfg = parse_args(
        ["--model", "e=minilm,precision=fp32+int8,serve=int8,max_batch=8", "--model", "r=x", "--max-seq", "64"]
    )
    e, r = (specs.apply(cfg, s) for s in cfg.specs)
    assert (e.checkpoint, e.precisions, e.serve, e.max_batch, e.max_seq) == ("minilm", ("fp32", "int8"), "int8", 8, 64)
    assert (r.checkpoint, r.precisions, r.max_batch, r.max_seq) == ("x", ("fp32", "int8"), 32, 64)
    assert e.specs == () and r.specs == ()


def test_a_path_with_an_equals_sign_is_still_a_plain_checkpoint():
    assert not specs.is_named("/data/run=3/ckpt") and specs.is_named("embed=/data/run=3/ckpt")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "Embed=minilm"], "must start with a lower-case letter"),
        (["--model", "embed="], "the checkpoint comes first"),
        (["--model", "embed=task=rerank"], "the checkpoint comes first"),
        (["--model", "embed=minilm,colour=red"], "unknown key 'colour'"),
        (["--model", "embed=minilm,precision"], "'precision' is not KEY=VALUE"),
        (["--model", "embed=minilm,task=embed,task=rerank"], "task is given twice"),
        (["--model", "a=minilm", "--model", "a=bert-base"], "two --model specs are named 'a'"),
        (["--model", "a=minilm", "--model", "bert-base"], "'bert-base' has no NAME="),
        (["--model", "minilm", "--model", "bert-base"], "several models need NAME=CHECKPOINT"),
        (["--model", "a=minilm", "--task", "rerank"], "--task and --serve are each model's own"),
    ],
)
def test_a_bad_spec_is_refused_naming_what_is_wrong(argv, message):
    with pytest.raises(ConfigError, match=message):
        parse_args(argv)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("e=minilm,precision=fp64", "unknown precision 'fp64'"),
        ("e=minilm,max_batch=lots", "max_batch='lots'"),
        ("e=minilm,precision=fp32,serve=int8", "--serve int8 is not among"),
        ("e=minilm,task=summarize", "unknown task 'summarize'"),
    ],
)
def test_a_bad_value_in_a_spec_names_the_model(spec, message):
    cfg = parse_args(["--model", spec])
    with pytest.raises(ConfigError, match=message) as info:
        specs.apply(cfg, cfg.specs[0])
    assert "--model e=" in str(info.value)


def test_companions_take_the_name_as_prefix_except_the_default_embedder():
    assert specs.names_for("embed", "embed") == specs.ModelNames("embed", "")
    named = specs.names_for("small", "embed")
    assert (named.bert, named.tokenizer, named.staging("int8")) == ("small_bert", "small_tokenizer", "small_bert_int8")
    assert specs.names_for("reranker", "rerank").planned("rerank", ("fp32",)) == ["reranker"]


def test_two_specs_that_would_write_the_same_model_are_refused_before_any_work():
    cfg = parse_args(["--model", "embed=minilm", "--model", "bert=minilm-cross-encoder"])
    with pytest.raises(ConfigError, match="would both write a model named 'bert'"):
        plan(cfg, _task)
    cfg = parse_args(["--model", "embed=minilm", "--model", "e2=minilm"])
    assert [t for _, _, t in plan(cfg, _task)] == ["embed", "embed"]


def test_the_merged_index_lists_every_model_with_its_task():
    cfg = parse_args(["--model", "embed=minilm", "--model", "rerank=minilm-cross-encoder"])
    planned = plan(cfg, _task)
    parts = {
        "embed": {
            "source": "m", "torch": "2", "target": "cpu", "served": {"bert": "fp32"},
            "models": {"embed": {"backend": "bertserve", "task": "embed"}, "bert": {"backend": "bertserve"}},
            "ensemble_requires": {},
        },
        "rerank": {
            "source": "ce", "torch": "2", "target": "cpu", "task": "rerank",
            "models": {"rerank": {"backend": "bertserve", "task": "rerank"}}, "ensemble_requires": {},
        },
    }  # fmt: skip
    index = merged_index(cfg, planned, parts)
    assert {m: s.get("task") for m, s in index["models"].items()} == {
        "embed": "embed",
        "bert": None,
        "rerank": "rerank",
    }
    assert index["served"] == {"bert": "fp32"} and index["target"] == "cpu"
    assert index["specs"]["rerank"]["source"] == "ce" and index["specs"]["embed"]["task"] == "embed"


def test_a_spec_whose_checkpoint_is_nowhere_is_refused_before_any_work(tmp_path):
    cfg = parse_args(["--model", "embed=minilm", "--model", f"rerank={tmp_path / 'absent'},task=rerank"])
    with pytest.raises(CheckpointError, match="rerank=...: .*absent is neither minilm, bert-base"):
        plan(cfg, _task)
    (tmp_path / "ce").mkdir()
    (tmp_path / "ce" / "config.json").write_text("{}")
    cfg = parse_args(["--model", "embed=minilm", "--model", f"rerank={tmp_path / 'ce'},task=rerank"])
    assert [t for _, _, t in plan(cfg, _task)] == ["embed", "rerank"]
