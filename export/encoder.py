"""The network as served: (input_ids, attention_mask) -> mean-pooled, L2-normalised embedding."""

from __future__ import annotations

import torch
from torch import nn


def mean_pool_normalize(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Sentence-transformers pooling: mean over the tokens the mask keeps, then L2 norm."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1e-9)
    return nn.functional.normalize((summed / counts).float(), p=2.0, dim=1)


class Encoder(nn.Module):
    """Wraps a Hugging Face BertModel (as ``.bert``) into the serving contract."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return mean_pool_normalize(hidden, attention_mask)
