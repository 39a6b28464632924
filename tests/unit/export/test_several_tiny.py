"""Two embedders of the tiny checkpoint in one repository: `embed` keeps the single-model names, `small` prefixes its
companions; every config is named as its directory, every link and manifest holds, and the index lists both."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from export import several
from export.config import ExportConfig
from export.model_configs import parse
from serving.contract.manifest import entry_points, read, verify


def _task(cfg: ExportConfig) -> str:
    return "embed"


@pytest.fixture(scope="module")
def repo(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("several") / "repo"
    cfg = ExportConfig(
        model=(f"embed={tiny_checkpoint}", f"small={tiny_checkpoint},max_seq=16"),
        precisions=("fp32",),
        max_batch=4,
        max_seq=32,
        output=out,
        autotune=False,
        skip=frozenset({"onnx", "torchscript"}),
    )
    several.run(cfg, _task)
    return out


def test_each_embedder_has_its_own_names_and_configs(repo):
    index = json.loads((repo / "repository.json").read_text())
    assert entry_points(index) == {"embed": "embed", "small": "embed"}
    assert set(index["models"]) == {"embed", "bert", "tokenizer", "small", "small_bert", "small_tokenizer"}
    assert index["models"]["small"]["encoder"] == "small_bert" and index["served"] == {
        "bert": "fp32",
        "small_bert": "fp32",
    }
    assert index["specs"]["small"]["max_seq"] == 16 and index["specs"]["embed"]["max_seq"] == 32
    for model in index["models"]:
        assert parse((repo / model / "config.pbtxt").read_text()).name == model
        manifest = read(repo / model)
        assert manifest["model"] == model
        verify(repo / model, manifest)


def test_a_prefixed_embed_model_links_its_own_encoder(repo):
    links = [p for p in (repo / "small" / "1").iterdir() if p.is_symlink()]
    assert links and all(os.readlink(p).startswith("../../small_bert/") for p in links)
    assert all(p.resolve().is_file() for p in links)
