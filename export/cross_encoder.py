"""The cross-encoder as served: (input_ids, attention_mask, token_type_ids) of query/document pairs -> one
relevance score per pair (the one-label head's logit, float32), and a seeded one to export and test with.

No cross-encoder weights ship with the project and none may be downloaded. ``build_seeded`` makes a deterministic
stand-in: the packaged MiniLM body with BERT's pooler and a one-label head drawn from a fixed seed. Its scores
are a function of the inputs, equal wherever it runs, and that is what the tests check; they are NOT meaningful
relevance. Point ``--model`` at a real cross-encoder directory for that.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import AutoTokenizer, BertForSequenceClassification

from export.checkpoint import minilm_path

SEED = 0
POOLING = "cls"  # BERT's pooler: tanh(dense([CLS] hidden state))
HEAD = "pooler+linear"


class CrossEncoder(nn.Module):
    """Wraps a BertForSequenceClassification (as ``.model``) with one label into the serving contract."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
        return logits[:, 0].float()


def build_seeded(out: Path, seed: int = SEED) -> Path:
    """The packaged MiniLM body, a seeded pooler and one-label head, saved with save_pretrained (and MiniLM's
    tokenizer) into ``out``. The same seed gives the same weights, byte for byte."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers.logging.set_verbosity_error()  # the head's weights are new, by design
    torch.manual_seed(seed)
    model = BertForSequenceClassification.from_pretrained(str(minilm_path()), num_labels=1)
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
    """A local cross-encoder directory, offline, in eval mode."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return BertForSequenceClassification.from_pretrained(str(path), attn_implementation="sdpa").eval()
