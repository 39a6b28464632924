"""Unit-tier fixtures: a tiny BERT checkpoint (2 layers, hidden 64) with the real vocabulary, and its export."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from export.checkpoint import minilm_path
from export.config import ExportConfig
from export.pipeline import run

TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY), add_pooling_layer=False).save_pretrained(path)
    AutoTokenizer.from_pretrained(str(minilm_path())).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_repository(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint exported in fp32 (every artifact path) into a model repository."""
    out = tmp_path_factory.mktemp("export") / "repo"
    cfg = ExportConfig(
        model=str(tiny_checkpoint), precisions=("fp32",), max_batch=4, max_seq=32, output=out, autotune=False
    )
    run(cfg)  # untuned: tuning has its own test
    return out
