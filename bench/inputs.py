"""Seeded fixed-length inputs shared by every variant, and the encoder they run through."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

from export import checkpoint
from export.encoder import Encoder
from export.verify import calibration_batches, sentences

log = logging.getLogger(__name__)

CLS, SEP = 101, 102  # the BERT uncased vocabulary's [CLS] and [SEP]


@dataclass
class Model:
    encoder: Encoder  # fp32, on the CPU
    tokenizer: PreTrainedTokenizerFast | None
    source: str


def load_model(spec: str) -> Model:
    """The checkpoint as :mod:`export` loads it; ``bert-base`` without its tokenizer where that is not installed."""
    try:
        ckpt = checkpoint.load(spec)
    except ImportError:
        if spec != "bert-base":
            raise
        # No packaged vocabulary here: the same seeded BERT-base weights, inputs from random token ids.
        torch.manual_seed(checkpoint.BERT_BASE_SEED)
        bert = BertModel(BertConfig(), add_pooling_layer=False).eval()
        log.info("bert-base without a tokenizer: inputs are seeded random token ids")
        return Model(Encoder(bert).eval(), None, f"BertConfig() seeded {checkpoint.BERT_BASE_SEED}")
    return Model(Encoder(ckpt.model).eval(), ckpt.tokenizer, ckpt.source)


def token_stream(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """The shipped sentences' word pieces, end to end, without special tokens."""
    ids: list[int] = []
    for text in sentences():
        ids += tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids


def make_inputs(
    batch: int, seq: int, seed: int, stream: list[int] | None, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[batch, seq]`` int64 ids and an all-ones mask: real text cut from ``stream`` when given, else random ids.

    Each row is ``[CLS] <seq-2 word pieces> [SEP]`` starting at a seeded offset, so every length is filled
    with text (no padding) and the same (batch, seq, seed) gives the same tensor.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + batch * 1009 + seq)
    body = seq - 2
    if stream:
        source = torch.tensor(stream, dtype=torch.int64)
        while source.numel() < body + 1:
            source = torch.cat([source, source])
        starts = torch.randint(0, source.numel() - body, (batch,), generator=g)
        rows = torch.stack([source[int(s) : int(s) + body] for s in starts])
    else:
        rows = torch.randint(1000, vocab_size, (batch, body), generator=g, dtype=torch.int64)
    ids = torch.cat(
        [torch.full((batch, 1), CLS, dtype=torch.int64), rows, torch.full((batch, 1), SEP, dtype=torch.int64)], dim=1
    )
    return ids, torch.ones_like(ids)


def calibration(model: Model, max_seq: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """int8 calibration batches: the shipped sentence pairs (as export uses), else seeded random ids."""
    if model.tokenizer is None:
        vocab = int(model.encoder.bert.config.vocab_size)
        return [make_inputs(8, min(64, max_seq), seed + 7919 + i, None, vocab) for i in range(4)]
    return calibration_batches(model.tokenizer, max_seq)


def vocab_size(encoder: nn.Module) -> int:
    return int(encoder.bert.config.vocab_size)
