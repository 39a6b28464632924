"""Unit-tier fixtures: a tiny BERT checkpoint (2 layers, hidden 64) with the real vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from export.checkpoint import minilm_path

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
