"""The sensitivity tool's groups: every int8 Linear of the rewritten encoder in one layer and one class."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertModel

from export import sensitivity
from export.encoder import Encoder

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def test_layers_and_classes_each_partition_the_int8_linears():
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64
    )
    encoder = Encoder(BertModel(config)).eval()
    ids = torch.randint(1, 100, (2, 8))
    base = sensitivity.rewritten(encoder, [(ids, torch.ones_like(ids))], alpha=0.5, outliers=4)
    names = sensitivity.int8_linears(base)
    groups = sensitivity.groups(names, layers=3)
    assert len(names) == 18 and groups["all"] == set(names)
    layers = [groups[f"layer {i}"] for i in range(3)]
    classes = [groups[c] for c in sensitivity.CLASSES]
    for partition, size in ((layers, 6), (classes, 3)):
        assert all(len(g) == size for g in partition), partition
        assert set().union(*partition) == set(names)
    assert all(n.endswith(".main") for n in groups["FFN out"])  # the FFN outputs keep their outliers fp32
    assert not groups["FFN out"] & groups["attention output"]
    assert sensitivity.union(groups, "query+key") == groups["query"] | groups["key"]
    assert groups["none"] == set()
