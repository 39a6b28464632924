"""Export for the ``classify`` task: a sequence classifier checkpoint -> the native ``classify`` model.

The path is rerank's (export/rerank.py: trace with token_type_ids, AOTInductor fp32, the 1e-4 gate, manifest):
a classifier is the general case of the one-label cross-encoder. What differs is named here: the logits of every
label are traced and gated, on the shipped sentences alone and on the shipped pairs; the config takes TEXT and an
optional TEXT_PAIR and returns LOGITS, PROBABILITIES and LABEL; the seeded stand-in has three labels.
"""

from __future__ import annotations

from pathlib import Path

import torch

from export import cross_encoder, model_configs, rerank, tasks
from export.config import ExportConfig
from export.repository import serialize_strings
from export.verify import sentences

MODEL = "classify"
# The seeded classifier's labels: names to read in responses, with no meaning (its head is random).
SEEDED_LABELS = {0: "negative", 1: "neutral", 2: "positive"}
WARMUP_TEXT = "The quick brown fox jumps over the lazy dog."
GATE_BATCH = 8


def gate_batches(tokenizer, max_seq: int) -> list[dict[str, torch.Tensor]]:
    """The shipped sentences alone, then the shipped pairs, in batches of 8, encoded as the server encodes them."""
    texts = sentences()
    out = []
    for i in range(0, len(texts), GATE_BATCH):
        enc = tokenizer(
            texts[i : i + GATE_BATCH], padding=True, truncation=True, max_length=max_seq, return_tensors="pt"
        )
        out.append({k: enc[k] for k in rerank.INPUTS})
    return out + rerank.gate_batches(tokenizer, max_seq)


CLASSIFY = rerank.SequenceTask(
    name=MODEL,
    wrapper=cross_encoder.Classifier,
    gate_batches=gate_batches,
    config=model_configs.classify_config,
    warmup={model_configs.WARMUP_TEXT: serialize_strings([WARMUP_TEXT])},
    warmup_seq=16,
    seeded=tasks.SEEDED_CLASSIFIER,
    seeded_labels=SEEDED_LABELS,
    output="logit",
)


def run(cfg: ExportConfig) -> Path:
    return rerank.run(cfg, CLASSIFY)
