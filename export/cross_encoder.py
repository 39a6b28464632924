"""A sequence classifier as served, and seeded ones to export and test with.

``Classifier``: (input_ids, attention_mask, token_type_ids) of texts or text pairs -> the head's logits, float32
``[rows, labels]`` (the classify task). ``CrossEncoder``, the one-label case: query/document pairs -> one relevance
score per pair (the rerank task).

No classifier weights ship with the project and none may be downloaded. ``build_seeded`` makes a deterministic
stand-in: the packaged MiniLM body with BERT's pooler and a head drawn from a fixed seed (one label: a
cross-encoder; several: a classifier). Its outputs are a function of the inputs, equal wherever it runs, and that
is what the tests check; they are NOT meaningful relevance or labels. Point ``--model`` at a real checkpoint
directory for that.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from export.checkpoint import minilm_path

SEED = 0
POOLING = "cls"  # BERT's pooler: tanh(dense([CLS] hidden state))
HEAD = "pooler+linear"


class Classifier(nn.Module):
    """Wraps a BertForSequenceClassification (as ``.model``) into the serving contract: its logits, float32."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
        return logits.float()


class CrossEncoder(Classifier):
    """A one-label classifier as a scorer: one float32 score per pair, ``[rows]``."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        return super().forward(input_ids, attention_mask, token_type_ids)[:, 0]


def build_seeded(out: Path, seed: int = SEED, labels: dict[int, str] | None = None, body: str = "minilm") -> Path:
    """A seeded sequence classifier (one label unless ``labels`` names several) saved with save_pretrained (and
    MiniLM's tokenizer) into ``out``. ``body``: ``minilm``, the packaged MiniLM body with a seeded pooler and head;
    ``bert-base``, BERT-base's shape (``BertConfig()``, MiniLM's vocabulary size) drawn whole from the seed, for
    timing at that size. The same seed gives the same weights, byte for byte."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers.logging.set_verbosity_error()  # the head's weights are new, by design
    torch.manual_seed(seed)
    named = {"id2label": labels, "label2id": {v: k for k, v in labels.items()}} if labels else {}
    num_labels = len(labels) if labels else 1
    if body == "bert-base":
        model = BertForSequenceClassification(BertConfig(num_labels=num_labels, **named))
    elif body == "minilm":
        model = BertForSequenceClassification.from_pretrained(str(minilm_path()), num_labels=num_labels, **named)
    else:
        raise ValueError(f"body must be minilm or bert-base, got {body!r}")
    with torch.no_grad():  # draw every weight MiniLM lacks from the seed, not from whatever init ran before
        generator = torch.Generator().manual_seed(seed)
        for module in (model.bert.pooler.dense, model.classifier):
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * 0.05)
            module.bias.zero_()
    model.config.architectures = ["BertForSequenceClassification"]
    model.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(minilm_path())).save_pretrained(str(out))
    return out


def load(path: Path) -> BertForSequenceClassification:
    """A local sequence classifier directory (a cross-encoder or a classifier), offline, in eval mode."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return BertForSequenceClassification.from_pretrained(str(path), attn_implementation="sdpa").eval()
