"""A tiny random BERT encoder (2 layers, hidden 64, seeded) and token batches for the export unit tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

HIDDEN = 64


class TinyEncoder(torch.nn.Module):
    """Mean pooling and L2 norm over a BertModel, the serving contract in small (export/encoder.py)."""

    def __init__(self, bert: BertModel) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(pooled.float(), p=2.0, dim=-1)


def tiny_encoder() -> TinyEncoder:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    return TinyEncoder(BertModel(config)).eval()


def token_batch(seed: int, batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids; the last row's second half masked out (padding)."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, 1000, (batch, seq), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[-1, seq // 2 :] = 0
    return input_ids, attention_mask
